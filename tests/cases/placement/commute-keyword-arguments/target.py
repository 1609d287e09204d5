def build(runner, model):
    return runner.launch(
        model,
        batch_size=8,
        max_tokens=128,
        top_p=0.9,
    )
