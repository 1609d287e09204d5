class Runner:
    def __init__(
        self,
        model,
        batch_size: int = 8,
        seed: int | None = None,
        device: str = "cuda",
    ) -> None:
        self.model = model
