def build(meta):
    counts = meta.counts()
    drafts = meta.counts_cpu().sub_(1)
    assert drafts.shape == counts.shape

    return make(counts, drafts)
