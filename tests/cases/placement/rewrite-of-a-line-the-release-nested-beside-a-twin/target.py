class TokenOutput:
    def get_output(self) -> dict:
        self.copy_event.synchronize()
        return {"tokens": self.tokens}


class PoolingOutput:
    def get_output(self) -> dict:
        if isinstance(self.pooled, list):
            pooled = list(self.pooled_cpu.unbind(dim=0))
        else:
            pooled = self.pooled_cpu
        self.copy_event.synchronize()
        return {"pooled": pooled}
