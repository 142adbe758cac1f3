"""Assertions for the trainers the Python tests start as workers (api_worker.py,
local_optimizer_worker.py): a failed check raises AssertionError, which exits the worker
non-zero with the message."""


def check(condition, message):
    if not condition:
        raise AssertionError(message)


def raises(kind, words, call):
    """Checks that call() raises `kind` with every one of `words` in its message."""
    try:
        call()
    except kind as e:
        for w in words:
            check(w in str(e), f"{kind.__name__} message {str(e)!r} lacks {w!r}")
        return str(e)
    except Exception as e:  # noqa: BLE001: report the wrong type
        raise AssertionError(f"expected {kind.__name__} containing {words}, got "
                             f"{type(e).__name__}: {e}")
    raise AssertionError(f"expected {kind.__name__} containing {words}, nothing raised")
