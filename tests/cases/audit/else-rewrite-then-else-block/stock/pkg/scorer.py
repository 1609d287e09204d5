"""Scores for the draft tokens of one chunk."""

import math


def score_chunk(chunk, queries, keys, weights, use_half):
    if use_half:
        queries_cast = queries.half()
        keys_cast = keys.half()
    else:
        queries_cast = queries
        keys_cast = keys
    if chunk.on_cpu():
        scores = cpu_scores(
            queries_cast,
            keys_cast,
            weights[chunk.start : chunk.end],
        )
    else:
        scores = fused_scores(
            (queries_cast, chunk.query_scale),
            (keys_cast, chunk.key_scale),
            weights[chunk.start : chunk.end],
            chunk.lengths,
            normalize=False,
        )
    best = scores.argmax()
    return best, math.log(scores[best])


def pick(scores, k):
    order = sorted(range(len(scores)), key=scores.__getitem__)
    return order[-k:]
