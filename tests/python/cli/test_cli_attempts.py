"""Runs outlive their jobs (issue 33), end to end through the real `trainer` CLI against a real
trainerd running the real trainer-job: a job SIGKILLed mid-training (what an out-of-memory kill or
a preemption does) gets a new attempt that resumes the newest committed training state and trains
exactly the losses of the uninterrupted run (bit for bit, fp32 on the CPU); a job SIGSTOPped
(hung: its heartbeat stops) is stopped by trainerd and resumed the same way; execution.maxAttempts
1 fails the run at the first loss, and spent attempts fail it naming every attempt's cause."""
from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from cli_support import DATASET_NAME, MODEL_NAME, WORKLOAD, Cli, call, start_trainerd, stop, wait_for

STEPS = 24
SAVE_EVERY = 4
SILENCE_SECONDS = 10  # limits.jobSilenceSeconds of this module's trainerd: the job beats every 2 s
TERMINAL = ("COMPLETED", "FAILED", "CANCELLED")


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory):
    """A trainerd that retries soon (1 s backoff) and takes a job silent for 10 s for hung."""
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), {
        "baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
        "limits": {"jobSilenceSeconds": SILENCE_SECONDS, "attemptBackoffSeconds": 1, "cancelGraceSeconds": 2}})
    yield service
    stop(service.proc, service.data_dir)


def plan(max_attempts: int | None = None, save_every: int | None = SAVE_EVERY) -> str:
    execution = "{gpus: 0" + (f", saveEvery: {save_every}, keepAdapters: 100" if save_every else "")
    execution += (f", maxAttempts: {max_attempts}" if max_attempts is not None else "") + "}"
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:",
        f"  dataset: {DATASET_NAME}", "  hyperparams:", "    optimizer: {learningRate: 0.003}",
        f"    training: {{maxSteps: {STEPS}, batchSize: 4}}", "  maxSeqLength: 128",
        "  model: {precision: FP32}", f"execution: {execution}"]) + "\n"


def start(cli: Cli, text: str) -> str:
    out = cli("runs", "start", "-f", "-", "--force", "-o", "json", input=text)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["runId"]


def get(cli: Cli, run_id: str) -> dict:
    return cli.json("runs", "get", run_id)


def ended(cli: Cli, run_id: str) -> dict:
    return wait_for(lambda: (r := get(cli, run_id))["phase"] in TERMINAL and r, timeout=900, what="the run's end")


def losses(cli: Cli, run_id: str) -> dict[int, float]:
    return {s["step"]: s["loss"] for s in cli.json("runs", "metrics", run_id)["steps"]}


def attempt_pids(run_id: str, attempt: int) -> list[int]:
    """The trainer-job processes of one attempt, from the process table (its plan's path names the
    attempt's folder: DATA/runs/RUN/attempt-N/plan.json)."""
    found = subprocess.run(["pgrep", "-f", f"trainer-job run .*{run_id}/attempt-{attempt}/"],
                           capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def signal_attempt(run_id: str, attempt: int, sig: int) -> list[int]:
    pids = wait_for(lambda: attempt_pids(run_id, attempt), what=f"attempt {attempt}'s trainer-job")
    for pid in pids:
        os.kill(pid, sig)
    return pids


def running_past_a_snapshot(cli: Cli, run_id: str, attempt: int = 1) -> dict:
    """Waits until the attempt trains past its first committed training state (the steps after it
    are the ones the next attempt trains again)."""
    return wait_for(lambda: (r := get(cli, run_id))["attempt"] == attempt and r.get("savedStep", 0) >= SAVE_EVERY
                    and r["progress"].get("step", 0) > r["savedStep"] and r,
                    what=f"attempt {attempt} past a committed training state")


@pytest.fixture(scope="module")
def reference(ready):
    """The uninterrupted run every retried one is compared with."""
    run_id = start(ready, plan())
    run = ended(ready, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert [a["cause"] for a in run["attempts"]] == ["completed"], run["attempts"]
    return losses(ready, run_id)


def test_a_killed_job_gets_a_new_attempt_that_trains_exactly_as_uninterrupted(ready, trainerd, reference):
    run_id = start(ready, plan())
    running_past_a_snapshot(ready, run_id)
    signal_attempt(run_id, 1, signal.SIGKILL)  # as the kernel's out-of-memory killer would
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["attempt"] == 2
    first, second = done["attempts"]
    assert (first["number"], first["cause"], first["exitCode"]) == (1, "killed", 137), first
    assert first["ended"] and first["resumedFromSnapshot"] is None
    assert second["number"] == 2 and second["cause"] == "completed", second
    resumed = second["resumedFromStep"]
    assert resumed >= SAVE_EVERY and resumed % SAVE_EVERY == 0, second
    snap = ready.json("snapshots", "get", second["resumedFromSnapshot"][:12])
    assert snap["savedStep"] == resumed, snap  # (its training state may since be pruned: keepTrainingStates)
    assert losses(ready, run_id) == reference  # every step, those trained again too, bit for bit
    assert done["cost"]["gpuSeconds"] > 0
    status, answer = call(f"{trainerd.url}/v1/runs/{run_id}/events?waitSeconds=0")
    assert status == 200, answer
    events = answer["events"]
    lost = [e for e in events if e["type"] == "attempt"]
    assert len(lost) == 1 and lost[0]["cause"] == "killed" and lost[0]["nextAttempt"] == 2, lost
    text = ready("runs", "get", run_id)
    assert text.returncode == 0, text.stderr
    assert f"attempt 2 of 3, resumed from step {resumed} (attempt 1: killed, code 137)" in text.stdout, text.stdout


def test_a_hung_job_is_stopped_and_the_run_resumes(ready, reference):
    run_id = start(ready, plan())
    running_past_a_snapshot(ready, run_id)
    stopped = signal_attempt(run_id, 1, signal.SIGSTOP)  # alive, but silent: no heartbeat
    try:
        done = ended(ready, run_id)
    finally:
        for pid in stopped:  # never leave a stopped process behind, whatever happened
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    first = done["attempts"][0]
    assert first["cause"] == "hung" and first["exitCode"] == 137, first  # SIGTERM waits; SIGKILL ends it
    assert "limits.jobSilenceSeconds" in first["reason"], first
    assert done["attempts"][1]["resumedFromStep"] >= SAVE_EVERY
    assert losses(ready, run_id) == reference


def test_max_attempts_one_fails_the_run_at_the_first_loss(ready):
    run_id = start(ready, plan(max_attempts=1))
    wait_for(lambda: get(ready, run_id)["progress"].get("step", 0) >= 2, what="step 2")
    signal_attempt(run_id, 1, signal.SIGKILL)
    done = ended(ready, run_id)
    assert done["phase"] == "FAILED", done
    assert done["failureReason"].startswith("the training job exited with code 137 without reporting an outcome")
    assert [(a["number"], a["cause"]) for a in done["attempts"]] == [(1, "killed")]
    assert not ready.json("capacity")["claims"]


def test_spent_attempts_fail_the_run_naming_every_cause(ready):
    run_id = start(ready, plan(max_attempts=2, save_every=None))
    wait_for(lambda: get(ready, run_id)["progress"].get("step", 0) >= 1, what="attempt 1's first step")
    signal_attempt(run_id, 1, signal.SIGKILL)
    # No training state was committed: attempt 2 starts from the beginning.
    wait_for(lambda: (r := get(ready, run_id))["attempt"] == 2 and r["phase"] == "TRAINING", what="attempt 2")
    signal_attempt(run_id, 2, signal.SIGKILL)
    done = ended(ready, run_id)
    assert done["phase"] == "FAILED", done
    reason = done["failureReason"]
    assert reason.startswith("all 2 attempts (execution.maxAttempts 2) ended without an outcome: "
                             "attempt 1: killed, code 137; attempt 2: killed, code 137"), reason
    assert [a["resumedFromSnapshot"] for a in done["attempts"]] == [None, None]
    text = ready("runs", "get", run_id).stdout
    assert "attempt 2 of 2 (attempt 1: killed, code 137; attempt 2: killed, code 137)" in text, text
