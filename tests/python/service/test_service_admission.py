"""GPU pools, claims and quotas: admission against declared capacity, in order, within quotas."""
from service_helpers import plan


def test_two_runs_competing_for_one_device(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=10, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    first = d.ok(d.post("/v1/runs", plan()), 201)
    second = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(first["runId"], "TRAINING")
    waiting = d.wait_phase(second["runId"], "WAITING_FOR_DEVICES")
    assert waiting["claim"]["state"] == "QUEUED"
    cap = d.capacity()
    states = {c["owner"]: c["state"] for c in cap["claims"]}
    assert states == {first["runId"]: "GRANTED", second["runId"]: "QUEUED"}
    assert cap["pools"][0]["granted"] == 1 and cap["pools"][0]["queued"] == 1
    # The first ends; the queued claim is admitted and the second run trains to completion.
    assert d.wait_phase(first["runId"], "COMPLETED")
    done = d.wait_phase(second["runId"], "COMPLETED")
    phases = [p["phase"] for p in done["phaseHistory"]]
    assert phases[:3] == ["SIZING_DATASET", "WAITING_FOR_DEVICES", "SUBMITTING"]
    assert d.capacity()["claims"] == []


def test_queued_claims_are_admitted_in_order(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=4, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    ids = [d.ok(d.post("/v1/runs", plan()), 201)["runId"] for _ in range(3)]
    for i in ids:
        d.wait_phase(i, "COMPLETED")
    started = [d.run(i)["phaseHistory"] for i in ids]
    submit_times = [next(p["enteredAt"] for p in h if p["phase"] == "SUBMITTING") for h in started]
    assert submit_times == sorted(submit_times)


def test_a_workload_over_its_quota_waits(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=8, stepSeconds=0.1)
    # Two free devices, but the workload may hold one at a time.
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}])
    setup_basics(d, quota=1)
    first = d.ok(d.post("/v1/runs", plan()), 201)
    second = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(first["runId"], "TRAINING")
    waiting = d.wait_phase(second["runId"], "WAITING_FOR_DEVICES")
    assert waiting["claim"]["state"] == "QUEUED"
    cap = d.capacity()
    assert cap["pools"][0]["granted"] == 1  # a device is free: the quota holds the run back
    assert cap["quotas"] == [{"workload": "triage", "quota": 1, "held": 1, "queued": 1}]
    # Another workload is not held back by triage's quota.
    d.ok(d.post("/v1/workloads", {"name": "other"}), 201)
    other = d.ok(d.post("/v1/runs", plan(workload="other")), 201)
    d.wait_phase(other["runId"], {"TRAINING", "COMPLETED"})
    d.wait_phase(first["runId"], "COMPLETED")
    d.wait_phase(second["runId"], "COMPLETED")
    assert d.capacity()["claims"] == []


def test_raising_a_quota_admits_the_waiting_run(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=100, stepSeconds=0.05)
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}])
    setup_basics(d, quota=1)
    first = d.ok(d.post("/v1/runs", plan()), 201)
    second = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(second["runId"], "WAITING_FOR_DEVICES")
    d.ok(d.request("PATCH", "/v1/workloads/triage", {"gpuQuota": 2}), 200)
    d.wait_phase(second["runId"], "TRAINING")
    for r in (first, second):
        d.ok(d.post(f"/v1/runs/{r['runId']}/cancel"), 202)
        d.wait_phase(r["runId"], "CANCELLED")


def test_a_run_no_pool_can_ever_hold_is_refused_at_submission(start_trainerd, setup_basics):
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1},
                              {"name": "gpu", "accelerator": "nvidia-h100-80gb", "declared": 4, "maxClaim": 2}])
    setup_basics(d)
    r = d.post("/v1/runs", plan(gpus=3))
    assert r.status == 409, r
    err = r.json["error"]
    assert err["code"] == "failed_precondition" and err["field"] == "execution.gpus"
    assert "no GPU training pool can ever hold a claim of 3 devices" in err["message"]
    assert "gpu (maxClaim 2, declared 4)" in err["message"]
    assert d.ok(d.get("/v1/runs"), 200)["total"] == 0 and d.capacity()["claims"] == []
    # Beyond the workload's quota: also refused, never queued forever.
    d.ok(d.post("/v1/workloads", {"name": "small", "gpuQuota": 1}), 201)
    r = d.post("/v1/runs", plan(workload="small", gpus=2))
    assert r.status == 409 and "gpuQuota 1" in r.json["error"]["message"]
    assert d.ok(d.get("/v1/runs"), 200)["total"] == 0


def test_a_gpu_pool_declaring_no_devices_refuses_gpu_runs_and_reports_observed(start_trainerd, setup_basics):
    d = start_trainerd(pools=[{"name": "gpu", "accelerator": "nvidia-h100-80gb", "declared": 0, "maxClaim": 0},
                              {"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}])
    setup_basics(d)
    cap = d.capacity()
    # Observed capacity is what this host's driver reports (none without NVIDIA GPUs).
    gpu = next(p for p in cap["pools"] if p["name"] == "gpu")
    assert "observed" in gpu and gpu["observed"] >= 0
    r = d.post("/v1/runs", plan(gpus=1))
    assert r.status == 409 and r.json["error"]["field"] == "execution.gpus"
