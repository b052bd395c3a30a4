"""The task kernel under a trainerd SIGKILL at every phase boundary a step crosses.

trainerd's test hook TRAINER_TEST_KILL_AFTER=KIND:PHASE makes it SIGKILL itself right after the
commit of the step that moved a task of KIND into PHASE: the one fault here that cannot be caused
from outside at the exact boundary (a kill sent by the test lands anywhere). A trainerd started
again on the same data folder must then finish everything exactly once: both runs COMPLETED on
their first attempt, each with its adapter REGISTERED, no claim left, every task ended, and one
outcome event per run. A second flow, a comparison of a completed run's first snapshot against its
final model, covers the comparison and evaluation kinds the same way: the comparison COMPLETED
once, one evaluation per target, each over every row.

The boundaries are read against the kernel's own phase tables (GET /v1/info, taskKinds), so a
phase added to a table without a case here fails the first test.
"""
import json
import signal
import sqlite3
import time

import pytest

from service_helpers import CHAT_ROWS, jsonl, plan

# (kind, phase) of every boundary a task crosses in a step of this flow: two runs on one CPU device
# (the second waits for it), each registering its adapter, on a base model selected at the start.
BOUNDARIES = [
    ("base_model", "READY"),
    ("run", "WAITING_FOR_DEVICES"),
    ("run", "SUBMITTING"),
    ("run", "QUEUED"),
    ("run", "PREPARING"),
    ("run", "TRAINING"),
    ("run", "FINALIZING"),
    ("run", "CLEANING_UP"),
    ("run", "COMPLETED"),
    ("registration", "PENDING"),
    ("registration", "COPYING"),
    ("registration", "REGISTERED"),
]
# (kind, phase) of every boundary a task crosses in a step of the comparison flow: the source's
# registration, then one evaluation per target on the one CPU device (the second waits for it).
COMPARISON_BOUNDARIES = [
    ("comparison", "RUNNING"),
    ("comparison", "COMPLETED"),
    ("evaluation", "QUEUED"),
    ("evaluation", "RUNNING"),
    ("evaluation", "COMPLETED"),
]
# Phases no step of these flows enters: entered by a request (PAUSING, CANCELLED, a new selection),
# by a failure, by a judge, or by a model not yet ready when its run is first stepped.
NOT_IN_THIS_FLOW = {
    "run": {"SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "DEPLOYING_GRADER", "WAITING_FOR_GRADER", "PAUSING",
            "PAUSED", "FAILED", "CANCELLED"},
    "base_model": {"PREPARING", "FAILED"},
    "registration": {"FAILED"},
    # PREPARING is entered by the create request; PARTIAL and FAILED by a target that fails.
    "comparison": {"PREPARING", "PARTIAL", "FAILED"},
    "evaluation": {"FAILED", "CANCELLED"},
    # No endpoint in these flows: a trainerd killed at an endpoint's boundaries is not tested yet
    # (issue 24; tests/python/cli/test_cli_endpoints.py covers its phases without a kill).
    "endpoint": {"AWAITING_CAPACITY", "STARTING", "READY", "DELETING", "DELETED", "FAILED"},
    # No dataset analysis in these flows: tests/python/cli/test_cli_analyses.py kills trainerd right
    # after one started and sees it finish as attempt 2.
    "dataset_analysis": {"PENDING", "RUNNING", "COMPLETED", "FAILED"},
    # No curation in these flows: tests/python/cli/test_cli_curations.py SIGKILLs trainerd
    # mid-curation and sees it resume without judging a candidate twice.
    "curation": {"PENDING", "JUDGING", "COMPLETED", "FAILED"},
    # No pipeline in these flows: tests/python/cli/test_cli_pipelines.py kills trainerd while a
    # stage's run trains and while its evaluation runs, and sees no stage started twice.
    "pipeline": {"RUNNING", "INTERRUPTED", "COMPLETED", "FAILED", "CANCELLED"},
    # No distillation in these flows: tests/python/cli/test_cli_distillations.py SIGKILLs trainerd
    # mid-distillation and sees it complete, asking at most one chunk again.
    "distillation": {"PENDING", "SMOKE_TEST", "DISTILLING", "PAUSED", "ASSEMBLING", "COMPLETED", "FAILED",
                     "CANCELLED"},
}


def submit(d, key):
    """Submits run `key` (idempotent by submissionId); None when trainerd is gone."""
    try:
        reply = d.post("/v1/runs", plan(steps=2, submissionId=f"kill-test-{key}"))
    except OSError:
        return None
    return reply.json["runId"] if reply.status in (200, 201) else None


def test_every_boundary_of_the_flow_is_a_phase_of_its_kinds_table(start_trainerd):
    d = start_trainerd(job="real")
    kinds = {k["kind"]: k for k in d.ok(d.get("/v1/info"))["taskKinds"]}
    assert set(kinds) == {"run", "base_model", "registration", "comparison", "evaluation", "endpoint",
                          "dataset_analysis", "curation", "pipeline", "distillation"}
    for kind, table in kinds.items():
        phases = {p["name"] for p in table["phases"]}
        covered = {phase for k, phase in BOUNDARIES + COMPARISON_BOUNDARIES if k == kind}
        assert covered | NOT_IN_THIS_FLOW[kind] == phases, kind


@pytest.mark.parametrize("kind,phase", BOUNDARIES, ids=[f"{k}:{p}" for k, p in BOUNDARIES])
def test_a_trainerd_killed_after_a_phase_boundary_finishes_everything_once(start_trainerd, kind, phase):
    first = start_trainerd(job="real")
    # The workload and dataset first, on a trainerd without the hook.
    first.ok(first.post("/v1/workloads", {"name": "triage"}), 201)
    first.ok(first.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
    first.kill(signal.SIGTERM)

    d = first
    d.env["TRAINER_TEST_KILL_AFTER"] = f"{kind}:{phase}"
    d.start()
    runs = {}
    try:
        d.ok(d.post("/v1/base-models/select", {"name": "tiny/qwen3"}), 202)
        for key in ("a", "b"):
            runs[key] = submit(d, key)
    except OSError:
        pass  # it killed itself already
    deadline = time.time() + 120
    while d.proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert d.proc.returncode == -signal.SIGKILL, f"trainerd did not kill itself after {kind}:{phase}:\n{d.log()[-3000:]}"
    assert f"test hook: killed after {kind} " in d.log() and f" entered {phase}" in d.log()

    del d.env["TRAINER_TEST_KILL_AFTER"]
    d.start(port=int(d.url.rsplit(":", 1)[1]))  # the same address: a running job calls it back
    d.select_ready("tiny/qwen3")
    for key in ("a", "b"):
        runs[key] = runs.get(key) or submit(d, key)
        assert runs[key], f"run {key} could not be submitted after the restart"
    for key, run_id in runs.items():
        run = d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=180)
        assert run["phase"] == "COMPLETED", json.dumps(run, indent=1)[:3000]
        assert run["attempt"] == 1
        events = d.ok(d.get(f"/v1/runs/{run_id}/events?after=0"))["events"]
        assert [e["outcome"] for e in events if e["type"] == "outcome"] == ["COMPLETED"]
        assert run["modelId"], run
        deadline = time.time() + 60
        while d.ok(d.get(f"/v1/trained-models/{run['modelId']}"))["status"] != "REGISTERED":
            assert time.time() < deadline, d.ok(d.get(f"/v1/trained-models/{run['modelId']}"))
            time.sleep(0.05)
    assert d.capacity()["claims"] == []
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    try:
        open_tasks = db.execute("SELECT kind, id, phase FROM tasks WHERE terminal = 0").fetchall()
    finally:
        db.close()
    assert open_tasks == []


def open_tasks(d):
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    try:
        return db.execute("SELECT kind, id, phase FROM tasks WHERE terminal = 0").fetchall()
    finally:
        db.close()


def wait_killed(d, kind, phase):
    deadline = time.time() + 180
    while d.proc.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    assert d.proc.returncode == -signal.SIGKILL, f"trainerd did not kill itself after {kind}:{phase}:\n{d.log()[-3000:]}"
    assert f"test hook: killed after {kind} " in d.log() and f" entered {phase}" in d.log()


@pytest.mark.parametrize("kind,phase", COMPARISON_BOUNDARIES, ids=[f"{k}:{p}" for k, p in COMPARISON_BOUNDARIES])
def test_a_trainerd_killed_after_a_comparison_boundary_compares_once(start_trainerd, kind, phase):
    d = start_trainerd(job="real")
    d.ok(d.post("/v1/workloads", {"name": "triage"}), 201)
    d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
    d.select_ready("tiny/qwen3")
    run_id = d.ok(d.post("/v1/runs", plan(steps=2, execution={"gpus": 0, "saveEvery": 1})), 201)["runId"]
    assert d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=180)["phase"] == "COMPLETED"
    snapshots = d.ok(d.get(f"/v1/runs/{run_id}/snapshots"))["snapshots"]
    source = next(s["snapshotId"] for s in snapshots if s["savedStep"] == 1)
    d.kill(signal.SIGTERM)

    d.env["TRAINER_TEST_KILL_AFTER"] = f"{kind}:{phase}"
    d.start()
    request = {"source": source, "branches": [run_id], "dataset": "train", "maxNewTokens": 8,
               "submissionId": "kill-test"}
    try:
        d.ok(d.post("/v1/comparisons", request), 201)
    except OSError:
        pass  # it killed itself already
    wait_killed(d, kind, phase)

    del d.env["TRAINER_TEST_KILL_AFTER"]
    d.start()
    cid = d.ok(d.post("/v1/comparisons", request), 200, 201)["comparisonId"]  # the same one
    deadline = time.time() + 240
    while (done := d.ok(d.get(f"/v1/comparisons/{cid}")))["endedAt"] is None:
        assert time.time() < deadline, json.dumps(done, indent=1)[:3000]
        time.sleep(0.1)
    assert done["phase"] == "COMPLETED", json.dumps(done, indent=1)[:3000]
    assert [p["phase"] for p in done["phaseHistory"]].count("COMPLETED") == 1
    ids = [t["evaluationId"] for t in done["targets"]]
    listed = [e["evaluationId"] for e in d.ok(d.get("/v1/evaluations?limit=1000"))["evaluations"]]
    assert sorted(listed) == sorted(ids) and len(set(ids)) == 2  # none started twice
    for e in ids:
        evaluation = d.ok(d.get(f"/v1/evaluations/{e}"))
        assert evaluation["phase"] == "COMPLETED" and evaluation["report"]["rows"] == len(CHAT_ROWS), evaluation
    assert d.capacity()["claims"] == []
    assert open_tasks(d) == []
