"""The drift benchmark's parts: release sdists (`sdist`), edit sites (`sites`), cases and ground truth (`cases`),
the measured tools (`tools`) and markdown output (`markdown`). Driven by `benchmarks/drift_benchmark.py`."""
