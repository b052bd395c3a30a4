"""Waiting in the tests: poll the condition that a test needs, never sleep a guessed time."""
from __future__ import annotations

import time


def wait_for(predicate, timeout: float = 300.0, what: str = "condition", interval: float = 0.2):
    """Polls `predicate` every `interval` seconds; returns its first truthy value, or fails naming `what`."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")
