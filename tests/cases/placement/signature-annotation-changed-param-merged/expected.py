class Layer:
    def __init__(self, experts):
        self.experts = experts

    def fused_moe(self, strict: bool = False) -> FusedMoEFactory:
        if self.experts is None:
            raise ValueError("no experts")
        return self.experts

    def shared(self):
        return None
