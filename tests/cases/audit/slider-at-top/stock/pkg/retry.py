"""Retry a flaky call a few times."""


def with_retries(call, attempts):
    failures = 0
    for attempt in range(attempts):
        try:
            return call()
        except OSError:
            failures += 1
            note_failure(attempt)
            failures += 1
            continue
    raise RuntimeError(f"gave up after {failures} failures")
