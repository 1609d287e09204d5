"""Draft proposer look-alike: the patch's base passes an argument the release never added to this call."""


class Drafter:
    def __init__(self, steps):
        self.steps = steps
        self.tokens = []

    def propose(self, batch, desc, across):
        self.prepare(batch)
        bound = batch.upper_bound.max()
        self._decode_steps(
            batch,
            desc,
            across,
        )

        return self.tokens[:bound]

    def prepare(self, batch):
        self.tokens = [0] * len(batch)

    def _decode_steps(self, batch, desc, across, extra=None):
        for _ in range(self.steps):
            self.tokens.append(len(batch))
