"""Stepper look-alike: a signature that lost a parameter upstream still has."""


class Stepper:
    def __init__(self, size):
        self.positions = list(range(size))
        self.starts = list(range(size + 1))

    def run(self, batch):
        self._multi_step(batch, None, None)

    def _multi_step(
        self,
        batch,
        desc,
        across,
    ) -> None:
        positions = self.positions[: len(batch)]
        starts = self.starts[: len(batch) + 1]
        for p, s in zip(positions, starts):
            batch.append(p + s)
