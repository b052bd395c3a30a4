"""Runs that really train: trainerd starts the real trainer-job on the CPU pool, end to end."""
import json
import os
import pathlib
import signal
import time

from service_helpers import metric_value, plan


def test_a_run_trains_for_real_through_every_applicable_phase(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=3)), 201)
    done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert done["phase"] == "COMPLETED", json.dumps(done, indent=1)[:3000] + d.log()[-2000:]
    phases = [p["phase"] for p in done["phaseHistory"]]
    assert phases == ["SIZING_DATASET", "SUBMITTING", "QUEUED", "PREPARING", "TRAINING", "FINALIZING",
                      "CLEANING_UP", "COMPLETED"]
    assert done["progress"]["step"] == 3 and done["progress"]["totalSteps"] == 3
    adapter = pathlib.Path(done["adapterPath"])
    assert (adapter / "adapter_config.json").exists()
    steps = d.ok(d.get(f"/v1/runs/{run['runId']}/metrics"), 200)["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    assert all(s["loss"] > 0 for s in steps)
    assert done["cost"]["estimated"] is False and done["cost"]["gpuSeconds"] > 0
    assert d.capacity()["claims"] == []
    text = d.get("/metrics").raw.decode()
    for phase in phases:
        assert metric_value(text, "akka_optimize_training_run_phase_entries_total", run_phase=phase) == 1, phase
    assert metric_value(text, "akka_optimize_training_run_duration_seconds_count", run_outcome="COMPLETED") == 1


def test_trainerd_killed_while_a_real_job_trains_finds_it_again(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=40)), 201)
    d.wait_phase(run["runId"], "TRAINING", timeout=600)
    # Restarted where it was, as a service manager does: the job publishes its snapshots to the
    # catalog at trainerd's address and retries while trainerd is down.
    port = int(d.url.rsplit(":", 1)[1])
    d.kill(signal.SIGKILL)
    d.start(port=port)
    done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
    assert done["phase"] == "COMPLETED", json.dumps(done, indent=1)[:3000]
    steps = d.ok(d.get(f"/v1/runs/{run['runId']}/metrics"), 200)["steps"]
    assert [s["step"] for s in steps] == list(range(1, 41))
    assert d.capacity()["claims"] == []


def test_cancel_stops_a_real_job(start_trainerd, setup_basics):
    d = start_trainerd(job="real", grace=60)
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=5000)), 201)
    d.wait_phase(run["runId"], "TRAINING", timeout=600)
    deadline = time.time() + 300
    while d.run(run["runId"])["progress"]["step"] < 1 and time.time() < deadline:
        time.sleep(0.1)
    d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    done = d.wait_phase(run["runId"], {"CANCELLED", "FAILED", "COMPLETED"}, timeout=120)
    assert done["phase"] == "CANCELLED"
    assert d.capacity()["claims"] == []
    events = (d.data_dir / "runs" / run["runId"] / "attempt-1" / "events.jsonl").read_text().splitlines()
    assert json.loads(events[-1])["type"] == "cancelled"  # it stopped on SIGTERM, not SIGKILL
