"""Runner look-alike: one keyword argument threaded into three calls; the release rewrote the first call."""


def propose(model, batch):
    tokens = model.run_prefill(
        batch.inputs,
        batch.starts,
    )
    return tokens


def prefill(model, batch):
    hidden = model.run(
        batch.inputs,
        batch.positions,
    )
    return hidden


def decode(model, batch):
    hidden = model.run(
        batch.last_tokens,
        batch.positions,
    )
    return hidden
