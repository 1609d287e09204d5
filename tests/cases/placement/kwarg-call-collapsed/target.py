class Planner:
    def plan(self, batch):
        steps = self.count(batch)
        self._walk(batch, steps)

        return self.results[:steps]
