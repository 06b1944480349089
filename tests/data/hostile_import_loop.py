"""A model module that never finishes importing (an infinite loop at import time)."""

while True:
    pass


def net():  # pragma: no cover - never reached
    raise AssertionError("unreachable")
