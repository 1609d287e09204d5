class First:
    def create(self, layer):
        layer.register(
            "weight",
            shape=(1, 2),
            dtype=None,
            device=None,
        )
        layer.done()
        return layer


class Second:
    def create(self, layer):
        layer.register(
            "weight",
            shape=(1, 2),
            dtype=None,
        )
        layer.done()
        return layer
