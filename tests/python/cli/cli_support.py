"""Helpers of the CLI's end-to-end tests: start a real trainerd on a free port with a temporary
data folder, and run the real `trainer` binary against it.

Every process started here is stopped here (SIGTERM, then SIGKILL).
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import pathlib
import signal
import socket
import ssl
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
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")  # the phases a run ends in
GRID = """axes:
  - path: hyperparams.optimizer.learningRate
    values: [0.001, 0.002]
  - path: hyperparams.training.batchSize
    values: [2, 4]
"""  # a sweep of four points: two learning rates by two batch sizes


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
                   wait_ready: bool = True, data_dir: pathlib.Path | None = None,
                   args: tuple[str, ...] = (), env: dict | None = None,
                   ca_file: pathlib.Path | None = None) -> Trainerd:
    """Starts trainerd and waits until it answers and (with `wait_ready`) its startup completed.
    `data_dir`: its data folder (default TMP/data; replicas on one store share one); `args`: more
    of trainerd's options; `env`: variables added to trainerd's environment (TRAINER_TEST_CLOCK_FILE, ...);
    `ca_file`: trainerd serves HTTPS (its `args` name the certificate), verified with this CA."""
    data_dir = data_dir or tmp / "data"
    tmp.mkdir(parents=True, exist_ok=True)
    (tmp / "trainerd.json").write_text(json.dumps(config))
    port_file = tmp / "port"
    port_file.unlink(missing_ok=True)
    log = tmp / "trainerd.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "trainerd"), "--data-dir", str(data_dir), "--port", str(port),
             "--port-file", str(port_file), "--config", str(tmp / "trainerd.json"),
             "--job-binary", str(bin_dir / "trainer-job"), *args],
            stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
            env={**os.environ, **env} if env else None)
    deadline = time.time() + 30
    while not (port_file.exists() and port_file.read_text().strip()):
        if proc.poll() is not None or time.time() > deadline:
            stop(proc, data_dir)
            pytest.fail(f"trainerd did not start (exit {proc.returncode}):\n{log.read_text()}")
        time.sleep(0.05)
    url = f"{'https' if ca_file else 'http'}://127.0.0.1:{port_file.read_text().strip()}"
    tls = ssl.create_default_context(cafile=str(ca_file)) if ca_file else None
    while True:
        try:
            with urllib.request.urlopen(url + "/v1/info", timeout=5, context=tls) as r:
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
            stop(proc, data_dir)
            pytest.fail(f"trainerd did not become ready:\n{log.read_text()}")
        time.sleep(0.1)
    return Trainerd(url=url, data_dir=data_dir, proc=proc, log=log)


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
    if data_dir is not None:
        kill_processes(b"trainer-job", data_dir)


def kill_processes(program: bytes, data_dir: pathlib.Path) -> None:
    """SIGKILLs every process whose command line names both `program` and `data_dir`."""
    marker = str(data_dir).encode()
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if program in cmdline and marker in cmdline:
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
         headers: dict | None = None, timeout: float = 30.0) -> tuple[int, dict]:
    """One API request with a JSON body (and `headers`, e.g. job_credentials()); (status, answer).
    `timeout`: seconds to wait for the answer (a generation through an endpoint wants more)."""
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method,
                                 headers={"Content-Type": "application/json", **(headers or {})})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
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


def plan_text(max_steps: int = 3, max_attempts: int | None = None, *, save_every: int | None = None,
              keep_adapters: int | None = None, keep_training_states: int | None = None,
              optimizer: str = "{learningRate: 0.003}", **extra_top: str) -> str:
    """A small plan for the tests' service; `extra_top` adds top-level YAML lines. `max_attempts`:
    execution.maxAttempts (1: a job killed from outside fails the run instead of getting a new attempt).
    `save_every`, `keep_adapters`, `keep_training_states`: execution.saveEvery, keepAdapters and
    keepTrainingStates (None: left out, the service's default). `optimizer`: the YAML of
    config.hyperparams.optimizer."""
    execution = {"gpus": 0, "saveEvery": save_every, "keepAdapters": keep_adapters,
                 "keepTrainingStates": keep_training_states, "maxAttempts": max_attempts}
    lines = [
        "kind: run",
        f"workload: {WORKLOAD}",
        f"baseModel: {MODEL_NAME}",
        "config:",
        f"  dataset: {DATASET_NAME}",
        "  hyperparams:",
        f"    optimizer: {optimizer}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4}}",
        "  maxSeqLength: 128",
        "  model: {precision: FP32}",
        "execution: {" + ", ".join(f"{k}: {v}" for k, v in execution.items() if v is not None) + "}",
    ]
    lines += [f"{k}: {v}" for k, v in extra_top.items()]
    return "\n".join(lines) + "\n"


def job_pids(run_id: str, attempt: int | None = None) -> list[int]:
    """The run's trainer-job processes, from the process table (the plan's path names the run and
    the attempt's folder: DATA/runs/RUN/attempt-N/plan.json); `attempt`: only that attempt's."""
    pattern = f"trainer-job run .*{run_id}" + (f"/attempt-{attempt}/" if attempt is not None else "")
    found = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def kill_job_of(run_id: str, timeout: float = 120.0) -> None:
    """Fails a run for real: SIGKILLs its trainer-job once it runs, as the kernel's OOM killer
    would. (A plan that cannot train is now refused at submission, so a run that fails must fail
    while it runs.)"""
    deadline = time.time() + timeout
    while time.time() < deadline:
        pids = job_pids(run_id)
        if pids:
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
            return
        time.sleep(0.2)
    pytest.fail(f"no trainer-job process of run {run_id} appeared within {timeout:.0f}s")


# ---- the service's nouns through the CLI ------------------------------------------------------

def prepare(cli: Cli) -> Cli:
    """Readies a fresh service for the tests' plans: the tiny model selected, the sentiment
    dataset registered as DATASET_NAME, the workload WORKLOAD created."""
    cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
    cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET_NAME, check=True)
    cli("workloads", "create", WORKLOAD, check=True)
    return cli


def start_run(cli: Cli, text: str, *flags) -> dict:
    """Submits the plan `text` with `trainer runs start -f - --force -o json` (and `flags`) and
    returns the accepted run's record; with "--wait" among the flags, follows the run to its end
    with `runs wait` and returns its final record instead."""
    wait = "--wait" in flags
    out = cli("runs", "start", "-f", "-", "--force", "-o", "json", *[f for f in flags if f != "--wait"], input=text)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    if not wait:
        return run
    cli("runs", "wait", run["runId"], "--timeout", "15m", timeout=1000)
    return get_run(cli, run["runId"])


def start_run_id(cli: Cli, text: str, *flags) -> str:
    """start_run(), returning only the new run's id."""
    return start_run(cli, text, *flags)["runId"]


def get_run(cli: Cli, run_id: str) -> dict:
    """The run's record (`runs get -o json`)."""
    return cli.json("runs", "get", run_id)


def wait_run(cli: Cli, run_id: str, predicate, what: str, timeout: float = 300.0) -> dict:
    """Polls the run's record until `predicate(record)` holds; returns that record, or fails
    naming `what` after `timeout` seconds."""
    def check():
        run = get_run(cli, run_id)
        return run if predicate(run) else None
    return wait_for(check, timeout=timeout, what=f"run {run_id}: {what}")


def ended(cli: Cli, run_id: str, timeout: float = 900.0) -> dict:
    """Waits until the run is in a TERMINAL phase; returns its final record."""
    return wait_run(cli, run_id, lambda r: r["phase"] in TERMINAL, "its end", timeout)


def wait_step(cli: Cli, run_id: str, step: int) -> dict:
    """Waits until the run has trained `step` steps (or more); returns its record."""
    return wait_run(cli, run_id, lambda r: r["progress"].get("step", 0) >= step, f"step {step}")


def wait_phase(cli: Cli, run_id: str, phase: str) -> dict:
    """Waits until the run is in `phase`; returns its record."""
    return wait_run(cli, run_id, lambda r: r["phase"] == phase, phase)


def wait_paused(cli: Cli, run_id: str, what: str = "PAUSED with resources released") -> dict:
    """Waits until the run is PAUSED and its pause released its devices (the job is gone);
    returns its record."""
    return wait_run(cli, run_id, lambda r: r["phase"] == "PAUSED" and r["pause"]["resourcesReleased"], what)


def cancel_run(cli: Cli, run_id: str, wait: bool = True) -> None:
    """Cancels the run (`runs cancel --force`, whatever phase it is in); with `wait`, until it ended."""
    cli("runs", "cancel", run_id, "--force")
    if wait:
        ended(cli, run_id)


def count_runs(cli: Cli) -> int:
    """How many runs the service holds."""
    return cli.json("runs", "list", "--limit", "100")["total"]


def losses(cli: Cli, run_id: str) -> dict[int, float]:
    """The run's loss at each step, from `runs metrics`."""
    return {s["step"]: s["loss"] for s in cli.json("runs", "metrics", run_id)["steps"]}


def adapter_bytes(run: dict) -> bytes:
    """The bytes of the final adapter's weights of a completed run's record."""
    return (pathlib.Path(run["adapterPath"]) / "adapter_model.safetensors").read_bytes()


def run_snapshots(cli: Cli, run_id: str) -> list[dict]:
    """The run's committed snapshots, newest first (`runs snapshots`, up to 100)."""
    return cli.json("runs", "snapshots", run_id, "--limit", "100")["snapshots"]


def snapshot_at(cli: Cli, run_id: str, step: int) -> dict:
    """The run's committed snapshot saved at `step`."""
    return next(s for s in run_snapshots(cli, run_id) if s["savedStep"] == step)


def snapshot_id(run_id: str, step: int, digests: dict[str, str]) -> str:
    """The id the catalog gives a snapshot of the run at `step` whose kinds' manifests have `digests`
    (kind: sha256 of its manifest)."""
    text = f"trainer-snapshot-v1\n{run_id}\n{step}\n" + "".join(f"{k}={d}\n" for k, d in sorted(digests.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def weights_reservation(run_id: str, step: int, payload: bytes) -> tuple[str, dict, bytes]:
    """A weights snapshot of one file as a job reserves it: (snapshot id, reservation, manifest bytes)."""
    manifest = {"format": 1, "kind": "weights", "runId": run_id, "engineStep": step, "epoch": 0,
                "baseModelSha": "", "files": [{"path": "a.bin", "bytes": len(payload),
                                               "sha256": hashlib.sha256(payload).hexdigest()}]}
    text = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(text).hexdigest()
    sid = snapshot_id(run_id, step, {"weights": digest})
    body = {"snapshotId": sid, "attempt": 1, "step": step, "epoch": 0,
            "kinds": {"weights": {"manifestDigest": digest, "bytes": len(payload)}}}
    return sid, body, text


def grid_file(folder: pathlib.Path, text: str = GRID) -> pathlib.Path:
    """Writes a sweep's grid (`runs sweep --grid`) to FOLDER/grid.yaml; returns its path."""
    path = folder / "grid.yaml"
    path.write_text(text)
    return path
