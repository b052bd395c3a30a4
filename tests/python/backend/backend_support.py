"""Helpers shared by the backend tests: a trainerd with a given compute section, the CLI
against it, plans, and waiting on runs."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time
import urllib.request

from cli_support import DATASET_NAME, EXAMPLES, MODEL_NAME, WORKLOAD, Cli, plan_text, start_trainerd, stop

TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}


class Service:
    """A real trainerd (with `config`) and the real CLI against it, stopped by `close()`."""

    def __init__(self, bin_dir: pathlib.Path, tmp: pathlib.Path, tiny_model: pathlib.Path, config: dict):
        self.bin_dir = bin_dir
        self.tmp = tmp
        self.config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], **config}
        self.daemon = start_trainerd(bin_dir, tmp, self.config)
        self.cli = Cli(bin_dir / "trainer", self.daemon.url)

    def restart(self, kill: bool = True) -> None:
        """Stops trainerd (SIGKILL: no chance to tidy up) and starts it again on the same data and port."""
        self.halt(kill)
        self.start_again()

    def halt(self, kill: bool = True) -> None:
        """Stops trainerd (SIGKILL, or SIGTERM) and waits until it is gone; its jobs run on."""
        os.killpg(self.daemon.proc.pid, 9 if kill else 15)
        self.daemon.proc.wait(timeout=30)

    def start_again(self) -> None:
        """Starts trainerd on the data and port it had before halt()."""
        port = int(self.daemon.url.rsplit(":", 1)[1])
        self.daemon = start_trainerd(self.bin_dir, self.tmp, self.config, port=port)
        self.cli = Cli(self.bin_dir / "trainer", self.daemon.url)

    def close(self) -> None:
        stop(self.daemon.proc, self.daemon.data_dir)

    def ready(self) -> "Service":
        self.cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        self.cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET_NAME,
                 check=True)
        self.cli("workloads", "create", WORKLOAD, check=True)
        return self

    def start(self, max_steps: int = 3, gpus: int = 0, max_attempts: int | None = None) -> dict:
        plan = plan_text(max_steps=max_steps).replace(
            "execution: {gpus: 0}",
            f"execution: {{gpus: {gpus}" + (f", maxAttempts: {max_attempts}" if max_attempts else "") + "}")
        out = self.cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan)
        assert out.returncode == 0, out.stdout + out.stderr
        return json.loads(out.stdout)

    def get(self, run_id: str) -> dict:
        return self.cli.json("runs", "get", run_id)

    def wait_phase(self, run_id: str, phases, timeout: float = 300) -> dict:
        phases = {phases} if isinstance(phases, str) else set(phases)
        deadline = time.time() + timeout
        run = {}
        while time.time() < deadline:
            run = self.get(run_id)
            if run["phase"] in phases:
                return run
            if run["phase"] in TERMINAL:
                break
            time.sleep(0.3)
        raise AssertionError(f"run {run_id} did not reach {sorted(phases)}; it is {run.get('phase')}: "
                             f"{run.get('failureReason')}\n--- trainerd log\n{self.daemon.log_text()[-4000:]}")

    def wait_step(self, run_id: str, step: int = 1, timeout: float = 300) -> dict:
        """Waits until the run has trained `step` steps (its job is really running)."""
        deadline = time.time() + timeout
        run = {}
        while time.time() < deadline:
            run = self.get(run_id)
            if (run.get("progress") or {}).get("step", 0) >= step:
                return run
            if run["phase"] in TERMINAL:
                break
            time.sleep(0.3)
        raise AssertionError(f"run {run_id} never reached step {step}: {run.get('phase')} "
                             f"{run.get('failureReason')}\n--- trainerd log\n{self.daemon.log_text()[-4000:]}")

    def cancel(self, run_id: str) -> None:
        out = self.cli("runs", "cancel", run_id, "--force")
        assert out.returncode == 0, out.stderr

    def events(self, run_id: str) -> list[dict]:
        with urllib.request.urlopen(f"{self.daemon.url}/v1/runs/{run_id}/events?after=0", timeout=30) as r:
            return json.load(r)["events"]

    def first_step_seconds(self, run_id: str) -> float:
        """Seconds from the run's creation (trainer runs start) to its first training step event."""
        from datetime import datetime

        run = self.get(run_id)
        step = next(e for e in self.events(run_id) if e["type"] == "step")
        parse = lambda t: datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()  # noqa: E731
        return parse(step["time"]) - parse(run["createdAt"])

    def metrics(self, run_id: str) -> list:
        """The run's per-step metrics, as `trainer runs metrics -o json` gives them."""
        doc = self.cli.json("runs", "metrics", run_id)
        return doc["steps"] if isinstance(doc, dict) else doc


def job_environment(run_id: str, timeout: float = 120) -> dict:
    """The environment of the running trainer-job of `run_id`, read from /proc (what the job
    itself was given)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        for entry in pathlib.Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes()
                if b"trainer-job" not in cmdline or b"\0run\0" not in cmdline:
                    continue
                env = dict(item.split("=", 1) for item in
                           (entry / "environ").read_bytes().decode(errors="replace").split("\0") if "=" in item)
            except (OSError, ValueError):
                continue
            if env.get("TRAINER_RUN_ID") == run_id:
                return env
        time.sleep(0.2)
    raise AssertionError(f"no trainer-job process of run {run_id} found")


def trainer_job_version(bin_dir: pathlib.Path) -> str:
    """The version `trainer-job --version` prints (its second word)."""
    out = subprocess.run([str(bin_dir / "trainer-job"), "--version"], capture_output=True, text=True, check=True)
    return out.stdout.split()[1]
