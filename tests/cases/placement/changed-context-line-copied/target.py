def score(batch, rows, use_fast):
    row_start, row_end = rows
    if use_fast:
        out = fast_score(
            batch.queries,
            batch.keys,
            batch.weights[row_start:row_end],
            normalize=False,
        )
    return out
