class CacheConfig:
    """Cache settings."""

    dtype: str = "auto"
    """The data type of the cache (the state only, the rest
    is still controlled by cache_dtype). If set to 'auto', the data
    type will be determined by the model's dtype."""
    mode: str = "none"
    extra: int | None = None
    """The cache strategy:

    - "none": no caching.
    - "all": cache every state.
    - "align": cache the aligned states only."""
