def propose(model, input_ids, positions, intermediate_tensors):
    return model(
        input_ids=input_ids,
        positions=positions,
    )
        intermediate_tensors=intermediate_tensors,
