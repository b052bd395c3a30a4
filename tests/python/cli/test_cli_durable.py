"""Durable operations under SIGKILL of trainerd, through the real `trainer` CLI against a real
trainerd running the real job (docs/lineage.md, docs/snapshots.md): a sweep repeated with the same
`--submission-id` starts each child once; trainerd killed during a branch, in the middle of a
sweep's submission and in the middle of a snapshot commit, then started again on the same data
folder and port, finishes each operation (or it ends with its named outcome) and does nothing
twice. The kill points come from trainerd's test hooks (TRAINER_TEST_SWEEP_PAUSE_MS,
TRAINER_TEST_COMMIT_PAUSE_MS and TRAINER_TEST_COMMIT_PAUSE_AT)."""
from __future__ import annotations

import datetime
import os
import pathlib
import re
import signal
import subprocess
import time

import pytest

from cli_support import (GRID, MODEL_NAME, Cli, count_runs, ended, get_run, grid_file, plan_text, prepare,
                         run_snapshots, snapshot_at, start_run_id, start_trainerd, stop, wait_for, wait_paused, wait_phase, wait_step)

PARENT_STEPS = 4
SAVE_EVERY = 2
CHILD_STEPS = 2
HOLD_MS = 600_000  # a hook holds far longer than any test waits: the kill always comes first


def plan(max_steps: int, save_every: int = SAVE_EVERY) -> str:
    return plan_text(max_steps, save_every=save_every, keep_adapters=100, keep_training_states=100)


class Restartable:
    """One trainerd on a fixed port and data folder that a test can SIGKILL and start again,
    with or without a test hook. Jobs live in their own sessions: they outlive a kill."""

    def __init__(self, bin_dir: pathlib.Path, tmp: pathlib.Path, config: dict):
        self.bin_dir, self.tmp, self.config = bin_dir, tmp, config
        self.service = start_trainerd(bin_dir, tmp, config)
        self.port = int(self.service.url.rsplit(":", 1)[1])
        self.cli = Cli(bin_dir / "trainer", self.service.url)
        self.log_offset = 0

    def kill(self) -> float:
        """SIGKILLs trainerd alone (not its jobs); returns the wall time of the kill."""
        t = time.time()
        if self.service.proc.poll() is None:
            os.kill(self.service.proc.pid, signal.SIGKILL)
        self.service.proc.wait(timeout=30)
        return t

    def restart(self, **hooks: str) -> None:
        """Kills trainerd if it runs, then starts it on the same port and data folder with the
        given TRAINER_TEST_* hooks in its environment (none: a plain restart)."""
        self.kill()
        self.log_offset = len(self.service.log_text())
        for key, value in hooks.items():
            os.environ[key] = value
        try:
            deadline = time.time() + 30
            while True:  # the port is free again once the killed process's socket is gone
                try:
                    self.service = start_trainerd(self.bin_dir, self.tmp, self.config, port=self.port)
                    break
                except pytest.fail.Exception:
                    if time.time() > deadline:
                        raise
                    time.sleep(1.0)
        finally:
            for key in hooks:
                del os.environ[key]
        assert self.service.url == self.cli.url

    def new_log(self) -> str:
        """What trainerd logged since its last (re)start."""
        return self.service.log_text()[self.log_offset:]

    def stop(self) -> None:
        stop(self.service.proc, self.service.data_dir)


@pytest.fixture(scope="module")
def svc(bin_dir, tiny_model, tmp_path_factory):
    service = Restartable(bin_dir, tmp_path_factory.mktemp("durable"),
                          {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]})
    try:
        prepare(service.cli)
        yield service
    finally:
        service.stop()


def completed(cli, run_id: str) -> dict:
    run = ended(cli, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert [h["phase"] for h in run["phaseHistory"]].count("COMPLETED") == 1, run["phaseHistory"]
    return run


def children(cli, run_id: str) -> list[dict]:
    return cli.json("runs", "branches", run_id, "--limit", "100")["branches"]


def holders(cli, snapshot_id: str) -> list[str]:
    return [h.get("runId", h["holder"]) for h in cli.json("snapshots", "get", snapshot_id)["heldBy"]]


def stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def wait_log(service: Restartable, pattern: str) -> re.Match:
    return wait_for(lambda: re.search(pattern, service.new_log()), what=f"trainerd to log /{pattern}/")


@pytest.fixture(scope="module")
def parent(svc):
    """A completed run with a committed snapshot (both kinds) at every SAVE_EVERY steps."""
    run = completed(svc.cli, start_run_id(svc.cli, plan(PARENT_STEPS)))
    source = snapshot_at(svc.cli, run["runId"], SAVE_EVERY)
    return run, source


# ---- a repeated sweep


def test_a_sweep_repeated_with_its_submission_id_starts_each_child_once(svc, parent, tmp_path):
    cli = svc.cli
    run, source = parent
    before = len(children(cli, run["runId"]))
    sweep = ["runs", "sweep", run["runId"], "--snapshot", source["snapshotId"], "--steps", str(CHILD_STEPS),
             "--grid", grid_file(tmp_path), "--submission-id", "grid-once"]
    first = cli.json(*sweep)
    assert first["total"] == 4 and first["created"] == 4 and first["submissionId"] == "grid-once"
    assert all(p["created"] for p in first["points"])
    again = cli.json(*sweep)
    assert [p["runId"] for p in again["points"]] == [p["runId"] for p in first["points"]]
    assert again["created"] == 0 and not any(p["created"] for p in again["points"])
    text = cli(*sweep, check=True).stdout
    assert "Started 0 children" in text and "4 of the 4 were started before by submission id grid-once" in text
    listed = children(cli, run["runId"])
    assert len(listed) == before + 4
    mine = {c["runId"]: c for c in listed if c["runId"] in {p["runId"] for p in first["points"]}}
    assert sorted(c["submissionId"] for c in mine.values()) == [f"grid-once-{i}" for i in range(4)]
    for point in first["points"]:
        child = completed(cli, point["runId"])
        assert child["sweepPoint"] == point["values"]
    assert svc.cli.json("snapshots", "get", source["snapshotId"])["heldBy"] == []


def test_a_sweep_token_reused_for_another_grid_or_too_long_is_refused_and_starts_nothing(svc, parent, tmp_path):
    cli = svc.cli
    run, source = parent
    before = count_runs(cli)
    base = ["runs", "sweep", run["runId"], "--snapshot", source["snapshotId"], "--steps", str(CHILD_STEPS)]
    other = grid_file(tmp_path, "axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.004]}\n")
    first = cli.json(*base, "--grid", other, "--submission-id", "grid-other")
    assert first["created"] == 1
    changed = grid_file(tmp_path, "axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.005]}\n")
    out = cli(*base, "--grid", changed, "--submission-id", "grid-other")
    assert out.returncode != 0
    assert "submissionId" in out.stderr and "use a new submissionId" in out.stderr, out.stderr
    assert "its sweepPoint differs" in out.stderr and "repeat the sweep" not in out.stderr, out.stderr
    out = cli(*base, "--grid", other, "--submission-id", "x" * 251)
    assert out.returncode != 0
    assert "submissionId" in out.stderr and "1-250 characters" in out.stderr, out.stderr
    assert count_runs(cli) == before + 1
    completed(cli, first["points"][0]["runId"])


def test_a_branch_token_reused_for_another_source_or_restore_is_refused_and_starts_nothing(svc, parent):
    """The child's plan does not name its source: the same token from another snapshot, or
    restoring something else, must not answer the first child as if it were the same request."""
    cli = svc.cli
    run, source = parent
    other = next(s for s in run_snapshots(cli, run["runId"]) if s["snapshotId"] != source["snapshotId"])
    branch = ["runs", "branch", run["runId"], "--steps", str(CHILD_STEPS), "--submission-id", "branch-source"]
    child_id = cli.json(*branch, "--snapshot", source["snapshotId"])["runId"]
    before = count_runs(cli)
    for flags in (["--snapshot", other["snapshotId"]], ["--snapshot", source["snapshotId"], "--restore",
                                                        "trainingState"]):
        out = cli(*branch, *flags)
        assert out.returncode != 0, out.stdout
        assert "submissionId" in out.stderr and f"was used by run {child_id}" in out.stderr, out.stderr
        assert "use a new submissionId" in out.stderr
    assert cli.json(*branch, "--snapshot", source["snapshotId"])["runId"] == child_id  # the same request: its child
    assert count_runs(cli) == before
    completed(cli, child_id)


# ---- SIGKILL of trainerd during a branch


@pytest.mark.parametrize("when", ["accepted", "running"])
def test_trainerd_killed_during_a_branch_ends_with_one_child_that_releases_its_hold(svc, parent, when):
    """Killed right after the branch was accepted (the child not started yet), or while the
    child trains: after the restart there is one child, it completes, and its hold on the
    source snapshot is gone; the same request again answers the same child."""
    cli = svc.cli
    run, source = parent
    token = f"branch-{when}"
    before = len(children(cli, run["runId"]))
    branch = ["runs", "branch", run["runId"], "--snapshot", source["snapshotId"], "--steps", str(CHILD_STEPS),
              "--submission-id", token]
    child_id = cli.json(*branch)["runId"]
    assert child_id in holders(cli, source["snapshotId"])
    if when == "running":
        wait_phase(cli, child_id, "TRAINING")  # the child trains
    else:
        assert get_run(cli, child_id)["phase"] in ("SIZING_DATASET", "WAITING_FOR_DEVICES", "SUBMITTING", "QUEUED",
                                               "PREPARING")
    svc.restart()
    child = completed(cli, child_id)
    assert child["submissionId"] == token and child["sourceSnapshotId"] == source["snapshotId"]
    assert len(children(cli, run["runId"])) == before + 1
    assert child_id not in holders(cli, source["snapshotId"])
    assert cli.json(*branch)["runId"] == child_id  # the request again: the same child, nothing new
    assert len(children(cli, run["runId"])) == before + 1
    assert child_id not in holders(cli, source["snapshotId"])
    steps = [s["step"] for s in cli.json("runs", "metrics", child_id)["steps"]]
    assert steps == list(range(1, CHILD_STEPS + 1))  # each step trained once


# ---- SIGKILL of trainerd in the middle of a sweep's submission


def test_trainerd_killed_in_the_middle_of_a_sweep_submission_is_finished_by_repeating_it(svc, parent, tmp_path):
    cli = svc.cli
    run, source = parent
    token = "grid-killed"
    # Other points than the other sweeps' of this parent: a point that repeats an existing child
    # exactly is refused (docs/lineage.md).
    killed_grid = GRID.replace("[0.001, 0.002]", "[0.0015, 0.0025]")
    assert killed_grid != GRID
    before = {c["runId"] for c in children(cli, run["runId"])}
    svc.restart(TRAINER_TEST_SWEEP_PAUSE_MS=str(HOLD_MS))
    sweep = [str(cli.binary), "runs", "sweep", run["runId"], "--snapshot", source["snapshotId"], "--steps",
             str(CHILD_STEPS), "--grid", str(grid_file(tmp_path, killed_grid)), "--submission-id", token, "-o", "json",
             "--trainer-url", cli.url]
    with subprocess.Popen(sweep, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) as cut_short:
        wait_log(svc, rf"sweep {token} paused after point 0 ")  # point 0 submitted, 1 to 3 not
        svc.kill()
        _, err = cut_short.communicate(timeout=60)
        assert cut_short.returncode != 0, err  # the caller never heard an answer
    svc.restart()
    submitted = {c["runId"]: c for c in children(cli, run["runId"]) if c["runId"] not in before}
    assert [c["submissionId"] for c in submitted.values()] == [f"{token}-0"]

    finished = cli.json("runs", "sweep", run["runId"], "--snapshot", source["snapshotId"], "--steps",
                        str(CHILD_STEPS), "--grid", grid_file(tmp_path, killed_grid), "--submission-id", token)
    assert finished["total"] == 4 and finished["created"] == 3
    assert [p["created"] for p in finished["points"]] == [False, True, True, True]
    assert finished["points"][0]["runId"] in submitted
    now = {c["runId"]: c for c in children(cli, run["runId"]) if c["runId"] not in before}
    assert sorted(now) == sorted(p["runId"] for p in finished["points"])  # the grid's 4, none twice
    assert sorted(c["submissionId"] for c in now.values()) == [f"{token}-{i}" for i in range(4)]
    for point in finished["points"]:
        assert completed(cli, point["runId"])["sweepPoint"] == point["values"]
    assert not set(holders(cli, source["snapshotId"])) & set(now)


# ---- SIGKILL of trainerd in the middle of a snapshot commit


@pytest.mark.parametrize("at", ["verified", "stored"])
def test_trainerd_killed_during_a_catalog_commit_commits_the_snapshot_once(svc, at):
    """The job's commit callback in flight when trainerd dies, before (`verified`) or after
    (`stored`) the catalog's durable write: after the restart the snapshot is committed once
    (by the job's retry, or already), never half; the run goes on and commits its later
    snapshots; the job's publication retried against the restarted trainerd."""
    cli = svc.cli
    steps = 3 * SAVE_EVERY
    svc.restart(TRAINER_TEST_COMMIT_PAUSE_MS=str(HOLD_MS), TRAINER_TEST_COMMIT_PAUSE_AT=at)
    run_id = start_run_id(cli, plan(steps))
    held = wait_log(svc, r"commit of snapshot ([0-9a-f]+) kind (\w+) held")
    snapshot_id, kind = held.group(1), held.group(2)
    killed_at = svc.kill()
    svc.restart()
    run = completed(cli, run_id)
    listed = run_snapshots(cli, run_id)
    ids = [s["snapshotId"] for s in listed]
    assert len(ids) == len(set(ids)) and snapshot_id in ids
    assert sorted(s["savedStep"] for s in listed) == list(range(SAVE_EVERY, steps + 1, SAVE_EVERY))
    for s in listed:  # every snapshot whole: each kind it reserved is committed (a save made while
        # uploads lagged behind the outage may carry weights only, and says so by reserving no more)
        assert "weights" in s["artifacts"] and sorted(s["artifacts"]) == sorted(s["kinds"]), s
    assert sorted(listed[0]["artifacts"]) == ["trainingState", "weights"]  # the final one: both
    commit = next(s for s in listed if s["snapshotId"] == snapshot_id)["kinds"][kind]
    if at == "verified":  # the durable write never happened: the job's retry committed it
        assert stamp(commit["committedAt"]) > killed_at
    else:  # committed before the kill: the retry found it committed and changed nothing
        assert stamp(commit["committedAt"]) <= killed_at
    job_log = (svc.service.data_dir / "runs" / run_id / "attempt-1" / "job.log").read_text(errors="replace")
    assert re.search(rf"publishing snapshot {snapshot_id[:12]} \(step \d+\) failed, retrying", job_log), job_log
    assert not re.search(r"publishing snapshot \w+ \(step \d+\) failed: ", job_log), job_log  # none gave up
    assert run["savedStep"] == steps


# ---- SIGKILL of trainerd just after `runs resume`: the new attempt's restore rides it out

# TRAINER_KILL_TRIALS=10 repeats each delay (the stress; the suite runs each once).
KILL_TRIALS = int(os.environ.get("TRAINER_KILL_TRIALS", "1"))


@pytest.mark.parametrize("trial", range(KILL_TRIALS))
@pytest.mark.parametrize("delay", [0.0, 0.05, 0.3, 1.0, 2.5])
def test_trainerd_killed_just_after_a_resume_never_fails_the_new_attempt(svc, delay, trial):
    """trainerd SIGKILLed `delay` s after `runs resume` accepted (its new attempt's job starting,
    restoring, or training): started again, the attempt restores its snapshot (its catalog read
    retried while trainerd was down) and the run completes on that attempt, nothing lost."""
    cli = svc.cli
    steps = 6 * SAVE_EVERY
    run_id = start_run_id(cli, plan(steps))
    wait_step(cli, run_id, SAVE_EVERY + 1)  # a step past a save
    cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
    wait_paused(cli, run_id)
    cli("runs", "resume", run_id, check=True)
    time.sleep(delay)  # the kill point, not an assertion
    svc.kill()
    svc.restart()
    run = completed(cli, run_id)
    assert run["attempt"] == 2, run["attempts"]
    assert [a["cause"] for a in run["attempts"]] == ["paused", "completed"], run["attempts"]
    assert run["progress"]["step"] == steps
