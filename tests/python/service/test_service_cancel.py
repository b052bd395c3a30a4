"""Cancel in every phase where a cancel can arrive; the claim is released every time."""
import time

import pytest

from service_helpers import plan


def assert_cancelled_and_released(d, run_id):
    run = d.wait_phase(run_id, {"CANCELLED", "COMPLETED", "FAILED"})
    assert run["phase"] == "CANCELLED" and run["outcome"] == "CANCELLED", run
    assert "claim" not in run
    assert d.claims_of(run_id) == []
    pools = d.capacity()["pools"]
    assert all(p["granted"] == 0 and p["queued"] == 0 for p in pools), pools
    return run


def test_cancel_while_waiting_for_the_base_model(start_trainerd, tiny_model, slow_model):
    d = start_trainerd(base_models=[{"name": "tiny/qwen3", "path": str(slow_model)}])
    d.ok(d.post("/v1/workloads", {"name": "triage"}), 201)
    from service_helpers import CHAT_ROWS, jsonl
    d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 201)
    assert d.ok(d.post("/v1/base-models/select", {"name": "tiny/qwen3"}), 202)["status"] == "preparing"
    run = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(run["runId"], "WAITING_FOR_BASE_MODEL")
    d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    done = assert_cancelled_and_released(d, run["runId"])
    assert [p["phase"] for p in done["phaseHistory"]] == ["SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "CANCELLED"]


def test_cancel_while_waiting_for_devices(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=500, stepSeconds=0.05)
    d = start_trainerd()
    setup_basics(d)
    holder = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(holder["runId"], "TRAINING")
    waiting = d.ok(d.post("/v1/runs", plan()), 201)
    w = d.wait_phase(waiting["runId"], "WAITING_FOR_DEVICES")
    assert w["claim"]["state"] == "QUEUED"
    d.ok(d.post(f"/v1/runs/{waiting['runId']}/cancel"), 202)
    done = d.wait_phase(waiting["runId"], "CANCELLED")
    assert d.claims_of(waiting["runId"]) == []
    assert "SUBMITTING" not in [p["phase"] for p in done["phaseHistory"]]
    d.ok(d.post(f"/v1/runs/{holder['runId']}/cancel"), 202)
    assert_cancelled_and_released(d, holder["runId"])


@pytest.mark.parametrize("phase, behaviour", [
    ("QUEUED", dict(queueSeconds=30)),
    ("PREPARING", dict(prepareSeconds=30)),
    ("TRAINING", dict(steps=1000, stepSeconds=0.05)),
])
def test_cancel_while_the_job_runs(start_trainerd, setup_basics, standin_behaviour, phase, behaviour):
    standin_behaviour(**behaviour)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(run["runId"], phase)
    assert d.claims_of(run["runId"])[0]["state"] == "GRANTED"
    accepted = d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    assert accepted["phase"] == "CLEANING_UP"
    again = d.post(f"/v1/runs/{run['runId']}/cancel")  # a repeated cancel has its effect once
    assert again.status in (202, 409), again
    done = assert_cancelled_and_released(d, run["runId"])
    history = [p["phase"] for p in done["phaseHistory"]]
    assert history[-2:] == ["CLEANING_UP", "CANCELLED"] and phase in history
    assert done["cost"]["estimated"] is False


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace_period(start_trainerd, setup_basics,
                                                                     standin_behaviour):
    standin_behaviour(ignoreTerm=True, steps=1000, stepSeconds=0.05)
    d = start_trainerd(grace=1)
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(run["runId"], "TRAINING")
    started = time.time()
    d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    assert_cancelled_and_released(d, run["runId"])
    assert time.time() - started >= 1.0


def test_cancel_of_an_ended_run_is_refused_and_changes_nothing(start_trainerd, setup_basics):
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    done = d.wait_phase(run["runId"], "COMPLETED")
    r = d.post(f"/v1/runs/{run['runId']}/cancel")
    assert r.status == 409 and r.json["error"]["code"] == "failed_precondition"
    assert "already ended COMPLETED" in r.json["error"]["message"]
    assert d.run(run["runId"]) == {**done, "cost": d.run(run["runId"])["cost"]}
