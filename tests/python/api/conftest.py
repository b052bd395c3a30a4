"""Fixtures of the API tests: a real trainerd on a loopback port, with server options chosen per test.

Every trainerd a test starts is killed at teardown, and so is every job it started.
"""
from __future__ import annotations

import json
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))               # tests/python: models.py
sys.path.insert(0, str(HERE.parent / "service"))   # the service tests' Trainerd and helpers

from service_helpers import CHAT_ROWS, STANDIN_JOB, Trainerd, jsonl, kill_jobs_under  # noqa: E402


class ServerUnderTest(Trainerd):
    """Trainerd started with extra command-line options (the HTTP server's limits)."""

    def __init__(self, data_dir, config, env=None, args=()):
        super().__init__(data_dir, config, env)
        self.args = list(args)

    def start(self, timeout: float = 30.0):
        import subprocess
        import time
        port_file = self.data_dir.parent / (self.data_dir.name + ".port")
        if port_file.exists():
            port_file.unlink()
        log = open(self.log_path, "ab")
        from service_helpers import BUILD
        self.proc = subprocess.Popen(
            [str(BUILD / "apps" / "trainerd"), "--data-dir", str(self.data_dir), "--port", "0",
             "--port-file", str(port_file), "--config", str(self.config_path), "--instance", "api-test", *self.args],
            stdout=log, stderr=log, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainerd exited with {self.proc.returncode}: {self.log()}")
            if port_file.exists() and port_file.read_text().strip():
                self.port = int(port_file.read_text().strip())
                self.url = f"http://127.0.0.1:{self.port}"
                info = self.request("GET", "/v1/info", timeout=10)
                if info.status == 200 and info.json["startup"]["ready"]:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"trainerd not ready after {timeout}s: {self.log()}")

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    from models import make_tiny_model
    return pathlib.Path(make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", arch="qwen3",
                                        tokenizer="qwen3", seed=0))


@pytest.fixture
def standin_file(tmp_path) -> pathlib.Path:
    path = tmp_path / "standin.json"
    path.write_text("{}")
    return path


@pytest.fixture
def serve(tmp_path, tiny_model, standin_file):
    """serve(*args, standin={...}) -> a ready trainerd started with trainerd options `args`."""
    started: list[ServerUnderTest] = []

    def start(*args, standin: dict | None = None) -> ServerUnderTest:
        standin_file.write_text(json.dumps(standin or {}))
        config = {
            "baseModels": [{"name": "tiny/qwen3", "path": str(tiny_model)}],
            "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
            "limits": {"cancelGraceSeconds": 2, "maxRequestBytes": 1 << 20, "maxDatasetBytes": 4 << 20},
            "jobBinary": str(STANDIN_JOB),
        }
        d = ServerUnderTest(tmp_path / f"data{len(started)}", config,
                            env={"TRAINER_STANDIN_FILE": str(standin_file)}, args=args)
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.kill()
        kill_jobs_under(d.data_dir)


def setup_basics(d: Trainerd, workload: str = "triage"):
    """Selects the tiny model, creates a workload and registers dataset `train`."""
    d.select_ready("tiny/qwen3")
    d.ok(d.post("/v1/workloads", {"name": workload}), 201)
    d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
