class Settings:
    """Holds settings.

    The ratio is a share of memory.
    """
    ratio: float = Field(default=0.9, gt=0, le=1, extra=None)
    """The share of memory to use, from 0
    to 1. More memory means larger
    batches, and less room for
    everything else."""
