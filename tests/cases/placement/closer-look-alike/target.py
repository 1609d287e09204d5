class Model:
    def __init__(self, config):
        self.logits = Logits(config.vocab_size)

        self.make_empty = (
            self.model.make_empty
        )

        # the target added a statement of its own after the hunk's one
        self.mapper = Mapper(
            prefix=config.prefix,
        )

    def embed(self, ids):
        return self.model.embed(ids)
