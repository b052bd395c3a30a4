"""A damaged stored run never ends trainerd: it is failed by name, and everything else goes on."""
import json
import signal
import sqlite3

from service_helpers import plan


def damage(data_dir, run_id, doc_text):
    db = sqlite3.connect(str(data_dir / "state.db"))
    with db:
        db.execute("UPDATE runs SET doc = ? WHERE id = ?", (doc_text, run_id))
    db.close()


def test_damaged_stored_runs_are_failed_by_name_after_a_restart(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=20, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    healthy = d.ok(d.post("/v1/runs", plan(steps=20)), 201)["runId"]
    garbage = d.ok(d.post("/v1/runs", plan(steps=20)), 201)["runId"]
    nested = d.ok(d.post("/v1/runs", plan(steps=20)), 201)["runId"]
    mistyped = d.ok(d.post("/v1/runs", plan(steps=20)), 201)["runId"]
    d.wait_phase(healthy, {"QUEUED", "PREPARING", "TRAINING"})
    for r in (garbage, nested, mistyped):
        d.wait_phase(r, "WAITING_FOR_DEVICES")
    d.kill(signal.SIGKILL)

    damage(d.data_dir, garbage, "garbage")
    damage(d.data_dir, nested, "[" * 10000 + "]" * 10000)
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    doc = json.loads(db.execute("SELECT doc FROM runs WHERE id = ?", (mistyped,)).fetchone()[0])
    db.close()
    doc["_"]["devices"] = "many"
    damage(d.data_dir, mistyped, json.dumps(doc))

    d.start()
    for run_id, why in ((garbage, "not valid JSON"), (nested, "nested more than"), (mistyped, "_.devices")):
        run = d.wait_phase(run_id, "FAILED")
        assert run["outcome"] == "FAILED"
        assert f"could not read the stored document of run {run_id}" in run["failureReason"], run
        assert why in run["failureReason"], run
        events = d.ok(d.get(f"/v1/runs/{run_id}/events?after=0"), 200)["events"]
        assert events[-1]["type"] == "outcome" and events[-1]["outcome"] == "FAILED"
    # The healthy run goes on to its end, and the API answers for every run.
    assert d.wait_phase(healthy, "COMPLETED", timeout=120)["outcome"] == "COMPLETED"
    listed = d.ok(d.get("/v1/runs?limit=10"), 200)
    assert {r["runId"]: r["phase"] for r in listed["runs"]} == {
        healthy: "COMPLETED", garbage: "FAILED", nested: "FAILED", mistyped: "FAILED"}
    assert d.capacity()["claims"] == []  # no claim leaked
    info = d.ok(d.get("/v1/info"), 200)
    assert info["startup"]["ready"] is True
    assert info["driver"]["errors"] >= 3
    assert "could not read" not in d.log() or "failing the run" in d.log()
    # New work is accepted.
    again = d.ok(d.post("/v1/runs", plan(steps=2)), 201)["runId"]
    assert d.wait_phase(again, "COMPLETED", timeout=120)["outcome"] == "COMPLETED"
