"""Fixtures of the service tests: a real trainerd on a free loopback port with a temp data dir.

Every trainerd a test starts is stopped at teardown (SIGKILL when it will not stop), and so is
every job process it started: they are found by their command lines naming the temp data dir.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
STANDIN_JOB = HERE / "standin_job.py"

sys.path.insert(0, str(HERE.parent))  # tests/python: models.py
sys.path.insert(0, str(HERE))

from service_helpers import CHAT_ROWS, jsonl  # noqa: E402

class Reply:
    def __init__(self, status: int, body: bytes):
        self.status = status
        self.raw = body
        try:
            self.json = json.loads(body) if body else None
        except ValueError:
            self.json = None

    def __repr__(self):
        return f"Reply({self.status}, {self.raw[:300]!r})"


class Trainerd:
    """A running trainerd and a small HTTP client for it."""

    def __init__(self, data_dir: pathlib.Path, config: dict, env: dict | None = None):
        self.data_dir = data_dir
        self.config_path = data_dir.parent / (data_dir.name + "-config.json")
        self.config_path.write_text(json.dumps(config))
        self.env = dict(os.environ, **(env or {}))
        self.proc: subprocess.Popen | None = None
        self.url = ""
        self.log_path = data_dir.parent / (data_dir.name + "-trainerd.log")

    def start(self, timeout: float = 30.0) -> "Trainerd":
        port_file = self.data_dir.parent / (self.data_dir.name + ".port")
        if port_file.exists():
            port_file.unlink()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BUILD / "apps" / "trainerd"), "--data-dir", str(self.data_dir), "--port", "0",
             "--port-file", str(port_file), "--config", str(self.config_path), "--instance", "test-instance"],
            stdout=log, stderr=log, env=self.env)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"trainerd exited with {self.proc.returncode}: {self.log()}")
            if port_file.exists() and port_file.read_text().strip():
                self.url = f"http://127.0.0.1:{port_file.read_text().strip()}"
                info = self.request("GET", "/v1/info")
                if info.status == 200 and info.json["startup"]["ready"]:
                    return self
            time.sleep(0.05)
        raise RuntimeError(f"trainerd not ready after {timeout}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def request(self, method: str, path: str, body=None, raw: bytes | None = None, timeout: float = 70) -> Reply:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as r:
                return Reply(r.status, r.read())
        except urllib.error.HTTPError as e:
            return Reply(e.code, e.read())

    def get(self, path):
        return self.request("GET", path)

    def post(self, path, body=None, raw=None):
        return self.request("POST", path, body, raw)

    # ---- helpers of the nouns
    def ok(self, reply: Reply, *codes: int):
        assert reply.status in (codes or (200, 201, 202)), reply
        return reply.json

    def select_ready(self, name: str, timeout: float = 60):
        self.ok(self.post("/v1/base-models/select", {"name": name}), 202)
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.ok(self.get(f"/v1/base-models/{name}"))
            if m["status"] == "ready":
                return m
            assert m["status"] == "preparing", m
            time.sleep(0.05)
        raise AssertionError(f"base model {name} not ready after {timeout}s")

    def run(self, run_id: str) -> dict:
        return self.ok(self.get(f"/v1/runs/{run_id}"), 200)

    def wait_phase(self, run_id: str, phases, timeout: float = 60) -> dict:
        phases = {phases} if isinstance(phases, str) else set(phases)
        deadline = time.time() + timeout
        run = self.run(run_id)
        while time.time() < deadline:
            if run["phase"] in phases:
                return run
            time.sleep(0.03)
            run = self.run(run_id)
        raise AssertionError(f"run {run_id} is {run['phase']}, not in {phases} after {timeout}s:\n"
                             f"{json.dumps(run, indent=1)[:3000]}\ntrainerd log:\n{self.log()[-3000:]}")

    def capacity(self) -> dict:
        return self.ok(self.get("/v1/capacity"), 200)

    def claims_of(self, run_id: str):
        return [c for c in self.capacity()["claims"] if c["owner"] == run_id]


def kill_jobs_under(data_dir: pathlib.Path):
    """Kills, by pid, every process whose command line names `data_dir` (the jobs a trainerd started)."""
    needle = str(data_dir)
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and "trainerd" not in cmdline.split(" ")[0]:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    from models import make_tiny_model
    return pathlib.Path(make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", arch="qwen3",
                                        tokenizer="qwen3", seed=0))


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory, tiny_model) -> pathlib.Path:
    """The tiny model plus a large extra file, so that preparing it into the cache takes a while."""
    import shutil
    path = tmp_path_factory.mktemp("models") / "tiny-qwen3-large"
    shutil.copytree(tiny_model, path)
    with open(path / "padding.bin", "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(384):
            f.write(block)
    return path


@pytest.fixture
def standin_behaviour(tmp_path):
    """Writes the stand-in job's behaviour file; returns a setter."""
    path = tmp_path / "standin.json"
    path.write_text("{}")

    def set_behaviour(**behaviour):
        path.write_text(json.dumps(behaviour))
    set_behaviour.path = path
    return set_behaviour


@pytest.fixture
def start_trainerd(tmp_path, tiny_model, standin_behaviour):
    """start_trainerd(pools=..., quotas=..., job=..., extra_models=...) -> a ready Trainerd."""
    started: list[Trainerd] = []

    def start(pools=None, quotas=None, job: str = "standin", grace: int = 2, base_models=None,
              data_dir: pathlib.Path | None = None) -> Trainerd:
        config = {
            "baseModels": base_models or [{"name": "tiny/qwen3", "path": str(tiny_model)}],
            "pools": pools or [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
            "limits": {"cancelGraceSeconds": grace, "maxRequestBytes": 65536, "maxDatasetBytes": 1 << 20},
        }
        if quotas:
            config["quotas"] = quotas
        config["jobBinary"] = str(STANDIN_JOB) if job == "standin" else str(BUILD / "apps" / "trainer-job")
        d = Trainerd(data_dir or tmp_path / f"data{len(started)}", config,
                     env={"TRAINER_STANDIN_FILE": str(standin_behaviour.path)})
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.kill()
        kill_jobs_under(d.data_dir)


@pytest.fixture
def setup_basics():
    """setup_basics(d) selects the tiny model, creates workload `triage`, registers dataset `train`."""
    def setup(d: Trainerd, workload="triage", quota=None):
        d.select_ready("tiny/qwen3")
        body = {"name": workload}
        if quota is not None:
            body["gpuQuota"] = quota
        w = d.ok(d.post("/v1/workloads", body), 201)
        ds = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
        return w, ds
    return setup


