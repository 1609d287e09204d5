"""Draft proposer look-alike: a multi-line call whose argument list drifted upstream."""

import math


class Drafter:
    def __init__(self, steps):
        self.steps = steps
        self.tokens = []

    def propose(self, batch, desc, across):
        self.prepare(batch)
        self._decode_steps(
            batch,
            desc,
            across,
        )

        return self.tokens[: len(batch)]

    def prepare(self, batch):
        self.tokens = [0] * len(batch)

    def _decode_steps(self, batch, desc, across, extra=None):
        for _ in range(self.steps):
            self.tokens.append(math.floor(len(batch)))
