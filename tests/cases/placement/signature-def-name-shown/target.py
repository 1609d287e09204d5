class Serving:
    def start(self):
        return self.ctx

    def prepare(
        self,
        ctx: Context,
    ):
        if ctx.inputs is None:
            raise ValueError("inputs not available")

    def collect(
        self,
        ctx: Context,
    ):
        if ctx.inputs is None:
            raise ValueError("prompts not available")
