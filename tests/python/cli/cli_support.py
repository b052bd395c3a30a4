"""Helpers of the CLI's end-to-end tests: start a real trainerd on a free port with a temporary
data folder, and run the real `trainer` binary against it.

Every process started here is stopped here (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import socket
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request

import pytest

from waiting import wait_for  # noqa: F401  (the CLI tests import it from here)

EXAMPLES = pathlib.Path(__file__).resolve().parents[3] / "examples"
MODEL_NAME = "tiny-qwen3"
DATASET_NAME = "sentiment-train"
WORKLOAD = "cli-tests"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclasses.dataclass
class Trainerd:
    url: str
    data_dir: pathlib.Path
    proc: subprocess.Popen
    log: pathlib.Path

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


def start_trainerd(bin_dir: pathlib.Path, tmp: pathlib.Path, config: dict, port: int = 0,
                   wait_ready: bool = True) -> Trainerd:
    """Starts trainerd and waits until it answers and (with `wait_ready`) its startup completed."""
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "trainerd.json").write_text(json.dumps(config))
    port_file = tmp / "port"
    port_file.unlink(missing_ok=True)
    log = tmp / "trainerd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "trainerd"), "--data-dir", str(tmp / "data"), "--port", str(port),
             "--port-file", str(port_file), "--config", str(tmp / "trainerd.json"),
             "--job-binary", str(bin_dir / "trainer-job")],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.time() > deadline:
            stop(proc, tmp / "data")
            pytest.fail(f"trainerd did not start (exit {proc.returncode}):\n{log.read_text()}")
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port_file.read_text().strip()}"
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/info", timeout=5) as r:
                startup = json.load(r).get("startup", {})
            if startup.get("ready", True) or (not wait_ready and any(not s["ok"] for s in startup.get("steps", []))):
                break
        except urllib.error.HTTPError as e:  # a failed startup answers info with an error status
            try:
                startup = json.loads(e.read()).get("startup", {})
            except (json.JSONDecodeError, AttributeError):
                startup = {}
            if not wait_ready and any(not s["ok"] for s in startup.get("steps", [])):
                break
        except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
            pass
        if proc.poll() is not None or time.time() > deadline:
            stop(proc, tmp / "data")
            pytest.fail(f"trainerd did not become ready:\n{log.read_text()}")
        time.sleep(0.1)
    return Trainerd(url=url, data_dir=tmp / "data", proc=proc, log=log)


def stop(proc: subprocess.Popen, data_dir: pathlib.Path | None = None) -> None:
    """Stops trainerd, then any job it left running under `data_dir` (trainerd leaves its jobs
    running on purpose, for the next trainerd to find; a test must not)."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
    if data_dir is None:
        return
    marker = str(data_dir).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if b"trainer-job" in cmdline and marker in cmdline:
            try:
                os.kill(int(entry.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


@dataclasses.dataclass
class Cli:
    """Runs the real `trainer` binary against one service."""
    binary: pathlib.Path
    url: str | None

    def __call__(self, *args, input: str | None = None, timeout: float = 120,
                 env: dict | None = None, check: bool = False) -> subprocess.CompletedProcess:
        full_env = {k: v for k, v in os.environ.items() if k not in ("TRAINER_URL", "NO_COLOR")}
        if env:
            full_env.update(env)
        argv = [str(self.binary), *map(str, args)]
        if self.url and "--trainer-url" not in args and "TRAINER_URL" not in (env or {}):
            argv += ["--trainer-url", self.url]
        out = subprocess.run(argv, input=input, capture_output=True, text=True, timeout=timeout,
                             env=full_env, stdin=None if input is not None else subprocess.DEVNULL)
        if check and out.returncode != 0:
            raise AssertionError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stdout}\n{out.stderr}")
        return out

    def json(self, *args, **kw):
        out = self(*args, "-o", "json", check=True, **kw)
        return json.loads(out.stdout)


def call(url: str, method: str = "GET", body: dict | None = None,
         headers: dict | None = None) -> tuple[int, dict]:
    """One API request with a JSON body (and `headers`, e.g. job_credentials()); (status, answer)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.load(e)


def job_credentials(trainerd: Trainerd, run_id: str, timeout: float = 120.0) -> dict:
    """The headers the run's current attempt sends the snapshot catalog (docs/job-protocol.md,
    "Snapshots"): X-Trainer-Job (TRAINER_JOB_ID) and Authorization: Bearer TRAINER_JOB_TOKEN, the
    token read from trainerd's store once the attempt's job was started."""
    def current():
        status, run = call(f"{trainerd.url}/v1/runs/{run_id}")
        assert status == 200, run
        db = sqlite3.connect(str(trainerd.data_dir / "state.db"))
        try:
            job_id = f"{run['runId']}-{run['attempt']}"
            row = db.execute("SELECT token FROM job_attempts WHERE job_id = ?", (job_id,)).fetchone()
        finally:
            db.close()
        return row and {"X-Trainer-Job": job_id, "Authorization": f"Bearer {row[0]}"}
    return wait_for(current, timeout=timeout, what=f"run {run_id}'s job attempt")


def plan_text(max_steps: int = 3, max_attempts: int | None = None, **extra_top: str) -> str:
    """A small plan for the tests' service; `extra_top` adds top-level YAML lines. `max_attempts`:
    execution.maxAttempts (1: a job killed from outside fails the run instead of getting a new attempt)."""
    lines = [
        "kind: run",
        f"workload: {WORKLOAD}",
        f"baseModel: {MODEL_NAME}",
        "config:",
        f"  dataset: {DATASET_NAME}",
        "  hyperparams:",
        "    optimizer: {learningRate: 0.003}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4}}",
        "  maxSeqLength: 128",
        "  model: {precision: FP32}",
        "execution: {gpus: 0}" if max_attempts is None else f"execution: {{gpus: 0, maxAttempts: {max_attempts}}}",
    ]
    lines += [f"{k}: {v}" for k, v in extra_top.items()]
    return "\n".join(lines) + "\n"


def kill_job_of(run_id: str, timeout: float = 120.0) -> None:
    """Fails a run for real: SIGKILLs its trainer-job once it runs, as the kernel's OOM killer
    would. (A plan that cannot train is now refused at submission, so a run that fails must fail
    while it runs.)"""
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = subprocess.run(["pgrep", "-f", f"trainer-job run .*{run_id}"], capture_output=True, text=True)
        pids = [int(p) for p in found.stdout.split()]
        if pids:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.2)
    pytest.fail(f"no trainer-job process of run {run_id} appeared within {timeout:.0f}s")
