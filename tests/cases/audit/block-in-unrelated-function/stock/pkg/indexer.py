"""Indexer look-alike: a release added a kernel above the function a patch targets."""


def _gather_kernel(src, dst, n):
    for i in range(n):
        dst[i] = src[i]
    mask = [0] * n
    if n:
        dst[0] = mask[0]
    return dst


def select_topk(scores, buffer, k, has_prefill, prefill_meta):
    scores = normalize(
        scores,
    )

    buffer[: len(scores)] = -1
    if has_prefill:
        meta = prefill_meta.narrow()
        assert meta is not None
        chosen = sorted(scores)[:k]
        buffer[: len(chosen)] = chosen
    return buffer


def normalize(scores):
    return [s / max(scores) for s in scores]
