"""vllm-compose: compose upstream vLLM PRs and skew fixes onto vLLM releases, placing every hunk where it belongs."""

try:
    from ._version import __version__
except ImportError:  # running from a source tree without an install
    __version__ = "0.0.0+unknown"
