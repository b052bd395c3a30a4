"""A job that never pushed its metrics still leaves its series on trainerd's /metrics (issue 15).

A job killed or crashed before its first export sends nothing; with the embedded relay, trainerd
then publishes, in the job's name, what it knows from the job's events file: the job's resource
as trainerd gave it, the steps it reported (0 before training: a dead loop shows as 0, not as
nothing), its latest step figures and no devices held. The job here is the test stand-in
(tests/python/service/standin_job.py), which writes the job protocol's events but exports no
metrics at all: exactly a job that never pushed.
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "service"))

from service_helpers import CHAT_ROWS, STANDIN_JOB, Trainerd, jsonl, kill_jobs_under, plan  # noqa: E402

RUN_LABELS = ("run_id", "run_attempt", "workload", "run_method", "run_engine", "run_base_model", "profile",
              "job_submission_id", "run_lora_rank", "run_learning_rate")


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    from models import make_tiny_model
    return pathlib.Path(make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", arch="qwen3",
                                        tokenizer="qwen3", seed=0))


@pytest.fixture
def trainerd(tmp_path, tiny_model):
    behaviour = tmp_path / "standin.json"
    behaviour.write_text("{}")
    config = {"baseModels": [{"name": "tiny/qwen3", "path": str(tiny_model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
              "limits": {"cancelGraceSeconds": 2}, "jobBinary": str(STANDIN_JOB),
              "telemetry": {"otlpIntervalMs": 1000, "jobSeriesRetentionSeconds": 600}}
    d = Trainerd(tmp_path / "data", config, env={"TRAINER_STANDIN_FILE": str(behaviour)}).start()
    d.behaviour = behaviour
    d.select_ready("tiny/qwen3")
    d.ok(d.post("/v1/workloads", {"name": "triage"}), 201)
    d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
    yield d
    d.kill()
    kill_jobs_under(d.data_dir)


def job_series(d: Trainerd, run_id: str) -> dict:
    """{(family, frozenset(labels)): value} of the series /metrics carries for `run_id`."""
    import re
    out = {}
    for line in d.get("/metrics").raw.decode().splitlines():
        if line.startswith("#") or f'akka_optimize_training_run_id="{run_id}"' not in line:
            continue
        name, rest = line.split("{", 1)
        body, value = rest.rsplit("}", 1)
        labels = {k.removeprefix("akka_optimize_training_"): v for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body)}
        out[(name.removeprefix("akka_optimize_training_"), frozenset(labels.items()))] = float(value)
    return out


def only(series: dict, family: str, **labels) -> float | None:
    found = [v for (f, ls), v in series.items() if f == family and all((k, str(x)) in ls for k, x in labels.items())]
    assert len(found) <= 1, (family, labels, found)
    return found[0] if found else None


def identity_of(series: dict) -> dict:
    labels = [dict(ls) for (_, ls) in series]
    return {k: labels[0].get(k) for k in RUN_LABELS}


def test_a_job_that_reported_steps_but_never_pushed_leaves_what_trainerd_knows(trainerd):
    d = trainerd
    d.behaviour.write_text(json.dumps({"steps": 2, "exitCode": 1}))  # two steps, then dies without an outcome
    run_id = d.ok(d.post("/v1/runs", plan(steps=2, max_attempts=1)), 201)["runId"]
    run = d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    assert run["phase"] == "FAILED", run
    series = job_series(d, run_id)
    assert series, "a job that never pushed left nothing on /metrics"
    assert identity_of(series) == {
        "run_id": run_id, "run_attempt": str(run["attempt"]), "workload": "triage", "run_method": "SFT",
        "run_engine": "native", "run_base_model": "tiny/qwen3", "profile": "cpu",
        "job_submission_id": f"{run_id}-{run['attempt']}", "run_lora_rank": "4", "run_learning_rate":
            identity_of(series)["run_learning_rate"]}, series
    assert float(identity_of(series)["run_learning_rate"]) == run["plan"]["config"]["hyperparams"]["optimizer"][
        "learningRate"]
    assert only(series, "sft_step_count_total") == run["progress"]["step"] == 2
    assert only(series, "sft_loss") == run["latest"]["loss"] == 1.0  # the stand-in's loss at step 2
    assert only(series, "sft_learning_rate") == run["latest"]["learningRate"]
    assert only(series, "sft_grad_norm") == run["latest"]["gradNorm"]
    assert only(series, "sft_throughput_per_second") == run["latest"]["tokensPerSecond"]
    assert only(series, "job_devices") == 0
    # Nothing the job never reported is made up.
    assert only(series, "sft_validation_loss") is None
    assert only(series, "sft_memory_allocated_peak_bytes") is None


def test_a_job_killed_before_any_event_shows_zero_steps(trainerd):
    d = trainerd
    d.behaviour.write_text(json.dumps({"queueSeconds": 3600}))  # sits silent before its first event
    run_id = d.ok(d.post("/v1/runs", plan(steps=3, max_attempts=1)), 201)["runId"]
    deadline = time.time() + 60
    pids = []
    while time.time() < deadline and not pids:
        pids = [int(p.name) for p in pathlib.Path("/proc").iterdir() if p.name.isdigit()
                and run_id.encode() in _cmdline(p) and b"standin_job" in _cmdline(p)]
        time.sleep(0.05)
    assert pids, "the run's job never started"
    killed = 0
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
            killed += 1
        except ProcessLookupError:  # a process of the listing that has ended since (e.g. a launcher)
            pass
    assert killed, f"every process of the run's job ended before it could be killed: {pids}"
    run = d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    assert run["phase"] == "FAILED", run
    series = job_series(d, run_id)
    assert only(series, "sft_step_count_total") == 0, series
    assert only(series, "job_devices") == 0, series
    assert only(series, "sft_loss") is None, series
    assert identity_of(series)["job_submission_id"] == f"{run_id}-1"


def _cmdline(entry: pathlib.Path) -> bytes:
    try:
        return (entry / "cmdline").read_bytes()
    except OSError:
        return b""
