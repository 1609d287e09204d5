class Alpha:
    def load(self, items):
        self.items = list(items)

    def mapping(self) -> list[str] | None:
        return None


class Beta:
    def load(self, items):
        self.items = sorted(items)

    def mapping(self) -> tuple[str, ...]:
        return ()
