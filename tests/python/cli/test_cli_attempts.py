"""Runs outlive their jobs (issue 33), end to end through the real `trainer` CLI against a real
trainerd running the real trainer-job: a job SIGKILLed mid-training (what an out-of-memory kill or
a preemption does) gets a new attempt that resumes the newest committed training state and trains
exactly the losses of the uninterrupted run (bit for bit, fp32 on the CPU); a job SIGSTOPped
(hung: its heartbeat stops) is stopped by trainerd and resumed the same way; execution.maxAttempts
1 fails the run at the first loss, and spent attempts fail it naming every attempt's cause. An
endpoint's serving process SIGSTOPped is stopped as hung and started again."""
from __future__ import annotations

import os
import random
import signal

import pytest

from cli_support import (MODEL_NAME, WORKLOAD, Cli, call, ended, job_pids, losses, plan_text, start_run_id, start_trainerd,
                         stop, wait_for, wait_run, wait_step)
from serving_processes import serving_pids
from stopped_processes import stopped

STEPS = 24
SAVE_EVERY = 4
SILENCE_SECONDS = 10  # limits.jobSilenceSeconds of this module's trainerd: the job beats every 2 s


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory):
    """A trainerd that retries soon (1 s backoff) and takes a job silent for 10 s for hung."""
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), {
        "baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
        "limits": {"jobSilenceSeconds": SILENCE_SECONDS, "attemptBackoffSeconds": 1, "cancelGraceSeconds": 2}})
    yield service
    stop(service.proc, service.data_dir)


def plan(max_attempts: int | None = None, save_every: int | None = SAVE_EVERY) -> str:
    return plan_text(STEPS, max_attempts, save_every=save_every, keep_adapters=100 if save_every else None)


def signal_attempt(run_id: str, attempt: int, sig: int) -> list[int]:
    """Sends `sig` to the attempt's trainer-job once it runs; returns the pids signalled."""
    pids = wait_for(lambda: job_pids(run_id, attempt), what=f"attempt {attempt}'s trainer-job")
    for pid in pids:
        os.kill(pid, sig)
    return pids


def running_past_a_snapshot(cli: Cli, run_id: str, attempt: int = 1) -> dict:
    """Waits until the attempt trains past its first committed training state (the steps after it
    are the ones the next attempt trains again)."""
    return wait_run(cli, run_id, lambda r: r["attempt"] == attempt and r.get("savedStep", 0) >= SAVE_EVERY
                    and r["progress"].get("step", 0) > r["savedStep"],
                    f"attempt {attempt} past a committed training state")


@pytest.fixture(scope="module")
def reference(ready):
    """The uninterrupted run every retried one is compared with."""
    run_id = start_run_id(ready, plan())
    run = ended(ready, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert [a["cause"] for a in run["attempts"]] == ["completed"], run["attempts"]
    return losses(ready, run_id)


# TRAINER_KILL_TRIALS=10 adds 9 trials that kill at a random step (the stress; the suite
# runs the first, which kills just past the first committed training state).
KILL_TRIALS = int(os.environ.get("TRAINER_KILL_TRIALS", "1"))


@pytest.mark.parametrize("trial", range(KILL_TRIALS))
def test_a_killed_job_gets_a_new_attempt_that_trains_exactly_as_uninterrupted(ready, trainerd, reference, trial):
    run_id = start_run_id(ready, plan())
    if trial == 0:
        running_past_a_snapshot(ready, run_id)
    else:
        wait_step(ready, run_id, random.Random(trial).randint(2, STEPS - 4))
    signal_attempt(run_id, 1, signal.SIGKILL)  # as the kernel's out-of-memory killer would
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["attempt"] == 2
    first, second = done["attempts"]
    assert (first["number"], first["cause"], first["exitCode"]) == (1, "killed", 137), first
    assert first["ended"] and first["resumedFromSnapshot"] is None
    assert second["number"] == 2 and second["cause"] == "completed", second
    resumed = second["resumedFromStep"]
    if trial == 0 or resumed is not None:  # (a random kill before the first save starts again at step 1)
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
    shown = f"attempt 2 of 3, resumed from step {resumed}" if resumed is not None else "attempt 2 of 3"
    assert f"{shown} (attempt 1: killed, code 137)" in text.stdout, text.stdout


def test_a_hung_job_is_stopped_and_the_run_resumes(ready, reference):
    run_id = start_run_id(ready, plan())
    running_past_a_snapshot(ready, run_id)
    with stopped(wait_for(lambda: job_pids(run_id, 1), what="attempt 1's trainer-job")):  # alive, but silent
        done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    first = done["attempts"][0]
    assert first["cause"] == "hung" and first["exitCode"] == 137, first  # SIGTERM waits; SIGKILL ends it
    assert "limits.jobSilenceSeconds" in first["reason"], first
    assert done["attempts"][1]["resumedFromStep"] >= SAVE_EVERY
    assert losses(ready, run_id) == reference


def test_max_attempts_one_fails_the_run_at_the_first_loss(ready):
    run_id = start_run_id(ready, plan(max_attempts=1))
    wait_step(ready, run_id, 2)
    signal_attempt(run_id, 1, signal.SIGKILL)
    done = ended(ready, run_id)
    assert done["phase"] == "FAILED", done
    assert done["failureReason"].startswith("the training job exited with code 137 without reporting an outcome")
    assert [(a["number"], a["cause"]) for a in done["attempts"]] == [(1, "killed")]
    assert not ready.json("capacity")["claims"]


def test_spent_attempts_fail_the_run_naming_every_cause(ready):
    run_id = start_run_id(ready, plan(max_attempts=2, save_every=None))
    wait_step(ready, run_id, 1)  # attempt 1's first step
    signal_attempt(run_id, 1, signal.SIGKILL)
    # No training state was committed: attempt 2 starts from the beginning.
    wait_run(ready, run_id, lambda r: r["attempt"] == 2 and r["phase"] == "TRAINING", "attempt 2 training")
    signal_attempt(run_id, 2, signal.SIGKILL)
    done = ended(ready, run_id)
    assert done["phase"] == "FAILED", done
    reason = done["failureReason"]
    assert reason.startswith("all 2 attempts (execution.maxAttempts 2) ended without an outcome: "
                             "attempt 1: killed, code 137; attempt 2: killed, code 137"), reason
    assert [a["resumedFromSnapshot"] for a in done["attempts"]] == [None, None]
    text = ready("runs", "get", run_id).stdout
    assert "attempt 2 of 2 (attempt 1: killed, code 137; attempt 2: killed, code 137)" in text, text


def test_a_hung_serving_process_is_stopped_and_its_endpoint_started_again(ready):
    created = ready.json("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--wait", "--timeout", "5m")
    assert created["phase"] == "READY", created
    eid = created["endpointId"]
    [pid] = serving_pids(eid)
    with stopped([pid]):  # alive, but silent: its heartbeat stops
        again = wait_for(lambda: (lambda e: e if e["phase"] == "READY" and e.get("restarts") == 1 else None)(
            ready.json("endpoints", "get", eid)), 120, "the serving process to be started again")
    why = again["lastRestart"]["reason"]
    assert (f"the serving process (pid {pid}) sent nothing, not even its heartbeat, for more than "
            f"limits.jobSilenceSeconds ({SILENCE_SECONDS} s); trainerd stopped it") in why, again
    assert serving_pids(eid) != [pid]
    assert ready.json("endpoints", "send", eid, "--input", "hi", "--max-tokens", 2)["usage"]["completion_tokens"] > 0
    assert ready.json("endpoints", "delete", eid)["phase"] == "DELETING"
    wait_for(lambda: ready.json("endpoints", "get", eid)["phase"] == "DELETED", 60, "the endpoint to be DELETED")
