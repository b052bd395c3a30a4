"""Processes a test stops with SIGSTOP (a job or a serving process that is alive but silent, as a
hung one is): never left behind, whatever the test's outcome."""
from __future__ import annotations

import contextlib
import os
import signal


@contextlib.contextmanager
def stopped(pids: list[int]):
    """SIGSTOPs `pids` for the block; SIGKILLs them after it (those still there)."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield pids
    finally:
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
