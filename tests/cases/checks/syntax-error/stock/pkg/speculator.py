def propose(model, input_ids, positions):
    return model(
        input_ids=input_ids,
        positions=positions,
    )
