"""Toy samplers."""


class Base:
    pass


class Sampler(Base):
    """Draw tokens from a distribution."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.calls = 0

    def draw(self, probs):
        self.calls += 1
        return max(range(len(probs)), key=probs.__getitem__)
