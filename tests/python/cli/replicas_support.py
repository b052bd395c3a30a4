"""What the replicas tests share (tests/python/cli/test_cli_replicas.py, the small version, and
tests/python/chaos/test_chaos_replicas.py, the full chaos test): several real trainerds on one
PostgreSQL database, and a sampler of what must hold at every moment while they run."""
from __future__ import annotations

import pathlib
import re
import threading

from cli_support import MODEL_NAME


def replicas_config(tiny_model: pathlib.Path, url: str, pool_devices: int, **extra) -> dict:
    """trainerd's configuration for replicas on the database `url`: the tiny model, one CPU pool of
    `pool_devices` declared devices (a claim of one each), and `extra` top-level sections."""
    return {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
            "pools": [{"name": "cpu", "accelerator": "cpu", "declared": pool_devices, "maxClaim": 1}],
            "store": {"kind": "postgres", "url": url}, **extra}


def open_runs_of(pg, database: str, replica: str) -> int:
    """The open runs whose task `replica` holds the lease of."""
    return int(pg.psql(database, "SELECT COUNT(*) FROM tasks WHERE kind = 'run' AND owner = :'owner' AND NOT terminal;",
                       owner=replica))


class Sampler:
    """Samples, every `interval` seconds until stopped, what must hold at every moment: the devices
    granted per pool (never more than declared), read from the store; with `processes`, also the
    trainer-job processes of the shared data folder (each attempt's distinct pids, and the replica
    that started each, its parent at first sight)."""

    def __init__(self, postgres_server, database: str, data_dir: pathlib.Path, interval: float = 0.1,
                 processes: bool = True):
        self.pg = postgres_server
        self.database = database
        self.marker = str(data_dir).encode()
        self.interval = interval
        self.processes = processes
        self.starts: dict[str, set[int]] = {}  # "RUN/attempt-N" -> pids seen
        self.parents: dict[int, int] = {}      # job pid -> its parent's pid when first seen
        self.most_granted: dict[str, int] = {}
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _jobs(self) -> None:
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if b"trainer-job" not in cmdline or self.marker not in cmdline:
                continue
            attempt = re.search(rb"/runs/([^/]+)/attempt-(\d+)/", cmdline)
            if not attempt:
                continue
            pid = int(entry.name)
            key = f"{attempt.group(1).decode()}/attempt-{attempt.group(2).decode()}"
            self.starts.setdefault(key, set()).add(pid)
            self.parents.setdefault(pid, int(stat.rsplit(")", 1)[1].split()[1]))

    def _claims(self) -> None:
        out = self.pg.psql(self.database, "SELECT pool, SUM(devices) FROM claims WHERE state = 'GRANTED' GROUP BY pool;")
        for line in filter(None, out.splitlines()):
            pool, devices = line.split("|")
            self.most_granted[pool] = max(self.most_granted.get(pool, 0), int(devices))

    def _loop(self) -> None:
        while not self._stop.is_set():
            if self.processes:
                self._jobs()
            self._claims()
            self.samples += 1
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
