class Runner:
    def __init__(
        self,
        model,
        dtype,
        batch_size: int = 8,
    ) -> None:
        self.model = model
