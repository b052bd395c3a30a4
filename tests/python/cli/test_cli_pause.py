"""Pause and resume end to end, through the real `trainer` CLI against a real trainerd running
the real job: a run paused (each policy) and resumed trains the same losses at every step, and
the same final adapter, as the same run uninterrupted (bit-exact in fp32 on the CPU); a job or a
trainerd killed with SIGKILL at chosen points loses nothing and does nothing twice."""
from __future__ import annotations

import os
import re
import signal

import pytest

from cli_support import (MODEL_NAME, Cli, adapter_bytes, ended, get_run, job_pids, losses, plan_text, prepare,
                         run_snapshots, start_run, start_run_id, start_trainerd, stop, wait_for, wait_paused, wait_run,
                         wait_step)

STEPS = 24
SAVE_EVERY = 4
# What the job logs when trainerd does not answer its report or its snapshot's publication.
RETRYING = re.compile(r"cannot post to \S+ yet; retrying|publishing snapshot \w+ \(step \d+\) failed, retrying")


def plan(max_steps: int = STEPS, save_every: int | None = SAVE_EVERY) -> str:
    return plan_text(max_steps, save_every=save_every, keep_adapters=100 if save_every else None)


@pytest.fixture(scope="module")
def reference(ready):
    """The uninterrupted run every paused one is compared with."""
    run = start_run(ready, plan(), "--wait")
    assert run["phase"] == "COMPLETED", run
    return run, losses(ready, run["runId"])


def test_a_run_paused_with_save_and_resumed_trains_exactly_as_uninterrupted(ready, reference):
    ref_run, ref_losses = reference
    run_id = start_run_id(ready, plan())
    wait_step(ready, run_id, 5)
    out = ready("runs", "pause", run_id, "--checkpoint", "save")
    assert out.returncode == 0 and "Pause accepted" in out.stdout, out.stderr
    assert get_run(ready, run_id)["phase"] in ("PAUSING", "PAUSED")
    run = wait_paused(ready, run_id)
    pause = run["pause"]
    assert pause["policy"] == "save" and pause["state"] == "paused", pause
    saved = pause["savedStep"]
    assert 5 <= saved < STEPS
    assert not run.get("claim")
    assert not job_pids(run_id)
    # The pause's snapshot holds both kinds and is the run's restorable state.
    snap = ready.json("snapshots", "get", pause["snapshotId"][:12])
    assert sorted(snap["artifacts"]) == ["trainingState", "weights"] and snap["savedStep"] == saved
    assert run["savedStep"] == saved

    out = ready("runs", "resume", run_id)
    assert out.returncode == 0 and "attempt 2" in out.stdout, out.stdout + out.stderr
    again = ready("runs", "resume", run_id)  # a repeated resume has its effect once
    assert get_run(ready, run_id)["attempt"] == 2, again.stdout + again.stderr
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["attempt"] == 2
    assert losses(ready, run_id) == ref_losses  # every step, bit for bit
    assert adapter_bytes(done) == adapter_bytes(ref_run)
    assert done["cost"]["gpuSeconds"] > 0


def test_a_run_paused_against_the_latest_snapshot_resumes_from_it_exactly(ready, reference):
    ref_run, ref_losses = reference
    run_id = start_run_id(ready, plan())
    wait_run(ready, run_id, lambda r: r.get("savedStep", 0) >= SAVE_EVERY, "a committed training state")
    out = ready("runs", "pause", run_id, "--checkpoint", "latest")
    assert out.returncode == 0, out.stderr
    run = wait_paused(ready, run_id, "PAUSED")
    assert run["pause"]["policy"] == "latest" and run["pause"]["savedStep"] % SAVE_EVERY == 0
    ready("runs", "resume", run_id, check=True)
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert losses(ready, run_id) == ref_losses
    assert adapter_bytes(done) == adapter_bytes(ref_run)


def test_a_plan_with_pause_at_step_pauses_itself_there_once_and_resumes_exactly(ready, reference):
    """pauseAtStep: the run saves and pauses itself after that step (not a multiple of saveEvery),
    with nobody asking; the resumed attempt does not pause again and trains what the uninterrupted
    run trained."""
    ref_run, ref_losses = reference
    at = SAVE_EVERY + 3
    run_id = start_run_id(ready, plan_text(STEPS, save_every=SAVE_EVERY, keep_adapters=100, pauseAtStep=str(at)))
    run = wait_paused(ready, run_id)
    pause = run["pause"]
    assert (pause["requestedBy"], pause["policy"], pause["state"], pause["savedStep"]) == ("plan", "save", "paused", at)
    assert run["progress"]["step"] == at and run["savedStep"] == at and not run.get("claim")
    assert sorted(ready.json("snapshots", "get", pause["snapshotId"][:12])["artifacts"]) == ["trainingState", "weights"]
    assert "pauseAtStep" not in pause.get("failureReason", "")
    shown = ready("runs", "get", run_id).stdout
    assert "PAUSED" in shown and "by the plan's pauseAtStep" in shown, shown
    ready("runs", "resume", run_id, check=True)
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")
    assert losses(ready, run_id) == ref_losses
    assert adapter_bytes(done) == adapter_bytes(ref_run)


def with_execution(text: str, fields: str) -> str:
    return text.replace("execution: {", "execution: {" + fields + ", ")


def test_the_resumable_cadence_saves_the_training_state_apart_from_the_weights(ready, reference):
    """execution.resumableSaveEvery: the training state every 12 steps, the weights every 4 (saveEvery):
    the saves between hold the weights only; the final snapshot holds both; the run trains as ever."""
    ref_run, ref_losses = reference
    run = start_run(ready, with_execution(plan(), "resumableSaveEvery: 12"), "--wait")
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    kinds = {s["savedStep"]: sorted(s["artifacts"]) for s in run_snapshots(ready, run["runId"])}
    both, weights = ["trainingState", "weights"], ["weights"]
    assert kinds == {4: weights, 8: weights, 12: both, 16: weights, 20: weights, 24: both}, kinds
    assert losses(ready, run["runId"]) == ref_losses
    assert adapter_bytes(run) == adapter_bytes(ref_run)
    resolved = ready.json("runs", "get", run["runId"])
    assert resolved["savedStep"] == 24


def test_resumable_save_minutes_saves_the_training_state_when_that_much_time_passed(ready):
    """execution.resumableSaveMinutes alone (no saveEvery): a training-state save at the first step
    boundary that long after the last; a few milliseconds: after every step."""
    text = with_execution(plan_text(4), "resumableSaveMinutes: 0.0001")
    run = start_run(ready, text, "--wait")
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    kinds = {s["savedStep"]: sorted(s["artifacts"]) for s in run_snapshots(ready, run["runId"])}
    # keepTrainingStates (2) keeps the newest two states; the older snapshots keep their weights.
    assert set(kinds) == {1, 2, 3, 4} and kinds[3] == kinds[4] == ["trainingState", "weights"], kinds


@pytest.mark.parametrize("fields, words", [
    ("resumableSaveEvery: 0", "execution.resumableSaveEvery: must be between 1 and"),
    ("resumableSaveMinutes: 0", "execution.resumableSaveMinutes: must be in (0, 10080]"),
    ("resumableSaveMinutes: soon", "execution.resumableSaveMinutes: must be a number")])
def test_a_bad_resumable_cadence_is_refused_by_name(ready, fields, words):
    before = ready.json("runs", "list")
    out = ready("runs", "start", "-f", "-", "--force", input=with_execution(plan_text(STEPS), fields))
    assert out.returncode != 0 and words in out.stderr, out.stderr
    assert ready.json("runs", "list") == before


@pytest.mark.parametrize("value, words", [("0", "must be between 1 and"), ("'7'", "must be an integer"),
                                          (str(STEPS), f"must be less than config.hyperparams.training.maxSteps ({STEPS})")])
def test_a_bad_pause_at_step_is_refused_by_name(ready, value, words):
    before = ready.json("runs", "list")
    out = ready("runs", "start", "-f", "-", "--force", input=plan_text(STEPS, pauseAtStep=value))
    assert out.returncode != 0 and "pauseAtStep" in out.stderr and words in out.stderr, out.stderr
    assert ready.json("runs", "list") == before


def test_a_job_killed_while_saving_for_a_pause_leaves_no_half_snapshot(ready, trainerd, reference):
    """SIGKILL of the job right after the pause is accepted (its save and publication in
    flight): the pause records the failed save, never a success; the run pauses against its last
    committed snapshot; the catalog lists only whole snapshots; resuming matches the reference."""
    _, ref_losses = reference
    run_id = start_run_id(ready, plan())
    wait_run(ready, run_id, lambda r: r.get("savedStep", 0) >= SAVE_EVERY, "a committed training state")
    ready("runs", "pause", run_id, "--checkpoint", "save", check=True)
    for pid in job_pids(run_id):
        os.kill(pid, signal.SIGKILL)
    run = wait_paused(ready, run_id, "PAUSED after the failed save")
    pause = run["pause"]
    assert pause["state"] == "pausedAfterFailedSave" and "save failed" in pause["failureReason"], pause
    listed = ready.json("runs", "snapshots", run_id)["snapshots"]
    for s in listed:  # whole snapshots only, each verified by its manifest
        kind = s["kinds"]["weights"]
        assert (trainerd.data_dir / kind["location"] / "manifest.json").exists()
    assert pause["snapshotId"] in [s["snapshotId"] for s in listed]
    ready("runs", "resume", run_id, check=True)
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert losses(ready, run_id) == ref_losses
    ids = [s["snapshotId"] for s in ready.json("runs", "snapshots", run_id, "--limit", "100")["snapshots"]]
    assert len(ids) == len(set(ids))  # nothing committed twice


def test_trainerd_killed_during_a_pause_finishes_it_after_restart(bin_dir, tiny_model, tmp_path):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    service = start_trainerd(bin_dir, tmp_path / "svc", config)
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        run_id = start_run_id(cli, plan())
        wait_step(cli, run_id, 3)
        cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
        port = int(service.url.rsplit(":", 1)[1])
        job_log = service.data_dir / "runs" / run_id / "attempt-1" / "job.log"
        before = len(job_log.read_bytes())
        os.kill(service.proc.pid, signal.SIGKILL)  # the job saves and calls back a trainerd that is gone
        service.proc.wait(timeout=10)
        # Started again once the job met the trainerd that is gone (it says it retries), or has
        # nothing left to tell it.
        wait_for(lambda: RETRYING.search(job_log.read_bytes()[before:].decode(errors="replace"))
                 or not job_pids(run_id), timeout=120, what="the job to find trainerd gone")
        service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
        run = wait_paused(cli, run_id, "PAUSED after the restart")
        assert run["pause"]["state"] == "paused", run["pause"]
        snap = cli.json("snapshots", "get", run["pause"]["snapshotId"])
        assert sorted(snap["artifacts"]) == ["trainingState", "weights"]
        cli("runs", "resume", run_id, check=True)
        done = ended(cli, run_id)
        assert done["phase"] == "COMPLETED", done.get("failureReason")
        assert sorted(losses(cli, run_id)) == list(range(1, STEPS + 1))
    finally:
        stop(service.proc, service.data_dir)
