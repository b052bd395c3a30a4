"""Finding an endpoint's `trainer-job serve` process by its command line (its spec path names the
endpoint), for the endpoint tests of tests/python/cli and tests/python/service."""
from __future__ import annotations

import pathlib


def serving_pids(endpoint_id: str) -> list[int]:
    """The live `trainer-job serve` processes of the endpoint (its spec path names it)."""
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if b"serve" in cmdline and any(endpoint_id.encode() in a for a in cmdline) and state != "Z":
            pids.append(int(entry.name))
    return pids
