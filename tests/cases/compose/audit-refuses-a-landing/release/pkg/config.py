def build(**kw):
    return kw


CONFIG = build(
    alpha=1,
    gamma=3,
)
