"""Scorer look-alike: a later patch edits inside the block an earlier one adds."""


def score(queries, keys, lengths, fast):
    if fast:
        out = fast_scores(queries, keys, lengths)
    total = out.sum()
    return out / total
