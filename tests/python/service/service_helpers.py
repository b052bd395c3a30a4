"""Helpers of the service tests: a trainerd process and its HTTP client, plans, rows, metrics."""
from __future__ import annotations

import json
import os
import pathlib
import re
import signal
import subprocess
import time
import urllib.error
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
STANDIN_JOB = HERE / "standin_job.py"

CHAT_ROWS = [
    {"messages": [{"role": "user", "content": f"Classify ticket {i}: printer on fire"},
                  {"role": "assistant", "content": json.dumps({"label": "urgent" if i % 2 else "normal"})}]}
    for i in range(8)
]


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)



def plan(workload="triage", dataset="train", gpus=0, steps=3, max_attempts=None, **extra) -> dict:
    """`max_attempts`: execution.maxAttempts (1: a job that dies without an outcome fails the run)."""
    p = {"kind": "run", "workload": workload, "baseModel": "tiny/qwen3",
         "config": {"dataset": dataset, "method": "sft", "maxSeqLength": 64,
                    "hyperparams": {"training": {"maxSteps": steps, "batchSize": 2}, "lora": {"rank": 4}},
                    "model": {"precision": "FP32"}},
         "execution": {"gpus": gpus}}
    if max_attempts is not None:
        p["execution"]["maxAttempts"] = max_attempts
    p.update(extra)
    return p


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

    def start(self, timeout: float = 30.0, port: int = 0) -> "Trainerd":
        """Starts trainerd; `port` 0 picks a free one (a restart may ask for the previous one)."""
        port_file = self.data_dir.parent / (self.data_dir.name + ".port")
        if port_file.exists():
            port_file.unlink()
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [str(BUILD / "apps" / "trainerd"), "--data-dir", str(self.data_dir), "--port", str(port),
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

    def request(self, method: str, path: str, body=None, raw: bytes | None = None, timeout: float = 70,
                headers: dict | None = None) -> Reply:
        data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json", **(headers or {})})
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


def metric_value(text: str, name: str, **labels) -> float | None:
    """The value of the series `name` whose labels include `labels` (summed over the rest)."""
    total, seen = 0.0, False
    for line in text.splitlines():
        if not line.startswith(name + "{"):
            continue
        body = line[len(name) + 1:line.rindex("}")]
        got = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body))
        if all(got.get(f"akka_optimize_training_{k}") == v for k, v in labels.items()):
            total += float(line.rsplit(" ", 1)[1])
            seen = True
    return total if seen else None
