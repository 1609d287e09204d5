class Stepper:
    def _advance(
        self,
        count: int,
        skip: bool,
        extra: dict | None = None,
    ) -> None:
        position = self.position[:count]
        offsets = self.offsets[: count + 1]
        for step in range(count):
            position += offsets[step]
        return min(position, self.upper_bound)
