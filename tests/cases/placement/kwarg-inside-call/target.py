class Planner:
    def plan(self, batch):
        steps = self.count(batch)
        if steps > 1:
            self._prepare(batch)
        self._walk(
            batch,
            steps,
        )

        return self.results[:steps]

    def _walk(self, batch, steps, upper_limit):
        for _ in range(steps):
            self.results.append(batch)
