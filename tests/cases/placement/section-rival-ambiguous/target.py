class Alpha:
    def load(self, items):
        self.items = list(items)
        return list(self.items)

    def mapping(self) -> list[str]:
        return self.model.mapping()


class Beta:
    def load(self, items):
        self.items = sorted(items)
        return tuple(self.items)

    def prepare(self):
        self.ready = True

    def mapping(self) -> list[str]:
        return self.model.mapping()
