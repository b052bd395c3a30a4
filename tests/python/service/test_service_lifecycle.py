"""A run's lifecycle through the HTTP API of a real trainerd: phases, progress, cost, metrics."""
import re

from service_helpers import metric_value, plan


def test_run_goes_through_every_applicable_phase_to_completed(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(queueSeconds=0.3, prepareSeconds=0.3, steps=4, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=4)), 201)
    assert run["phase"] == "SIZING_DATASET"
    assert run["attempt"] == 1
    assert re.fullmatch(r"[0-9a-f]{64}", run["settingsSha"])
    done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"})
    assert done["phase"] == "COMPLETED", done
    assert done["outcome"] == "COMPLETED"
    phases = [p["phase"] for p in done["phaseHistory"]]
    # SFT deploys no grader and the claim was granted at once: those phases are skipped, not faked.
    assert phases == ["SIZING_DATASET", "SUBMITTING", "QUEUED", "PREPARING", "TRAINING", "FINALIZING",
                      "CLEANING_UP", "COMPLETED"]
    assert done["progress"]["step"] == 4 and done["progress"]["totalSteps"] == 4
    assert done["latest"]["loss"] == 0.5
    assert done["cost"]["estimated"] is False and done["cost"]["gpuSeconds"] > 0
    assert done["adapterPath"].endswith("/adapter")
    assert "claim" not in done and d.claims_of(run["runId"]) == []
    steps = d.ok(d.get(f"/v1/runs/{run['runId']}/metrics"), 200)["steps"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert steps[0]["loss"] == 2.0
    events = d.ok(d.get(f"/v1/runs/{run['runId']}/events?after=0"), 200)["events"]
    assert [e["phase"] for e in events if e["type"] == "phase"] == phases
    assert events[-1]["type"] == "outcome" and events[-1]["outcome"] == "COMPLETED"
    hp = d.ok(d.get(f"/v1/runs/{run['runId']}/hparams"), 200)
    assert hp["sha"] == run["settingsSha"] and hp["hparams"]["config.hyperparams.lora.rank"] == 4

    text = d.get("/metrics").raw.decode()
    for phase in phases:
        assert metric_value(text, "akka_optimize_training_run_phase_entries_total", run_phase=phase) == 1, phase
    assert metric_value(text, "akka_optimize_training_run_duration_seconds_count", run_outcome="COMPLETED",
                        run_method="SFT") == 1
    assert metric_value(text, "akka_optimize_training_run_phase_duration_seconds_count", run_phase="TRAINING") == 1
    # A CPU pool's device-seconds are not GPU time (issue 15): cost.gpu.time has no CPU series.
    assert (metric_value(text, "akka_optimize_training_cost_gpu_time_seconds_total", workload="triage") or 0) == 0
    assert metric_value(text, "akka_optimize_training_run_active", run_phase="TRAINING") == 0
    assert metric_value(text, "akka_optimize_training_pool_devices_declared", pool_accelerator="cpu") == 1
    assert metric_value(text, "akka_optimize_training_pool_claims", claim_state="GRANTED") == 0
    assert metric_value(text, "akka_optimize_training_workload_devices_quota", workload="triage") == 8
    # Every service gauge series carries the instance attribute; the resource names the instance
    # too. (The job's series, labelled by its run, are the job's: the stand-in never pushes, so
    # trainerd publishes what it knows of it in the job's name, issue 15.)
    gauges = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE") and line.endswith("gauge")}
    for line in text.splitlines():
        if "akka_optimize_training_run_id=" in line:
            continue
        if line and not line.startswith("#") and line.split("{")[0] in gauges - {"target_info"}:
            assert 'akka_optimize_training_instance="test-instance"' in line, line
    assert 'service_instance_id="test-instance"' in text


def test_cost_is_an_estimate_while_training(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=200, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    training = d.wait_phase(run["runId"], "TRAINING")
    assert training["cost"]["estimated"] is True
    assert training["claim"] == {"pool": "cpu", "devices": 1, "state": "GRANTED", "since": training["claim"]["since"],
                                 "deviceIds": [0]}
    text = d.get("/metrics").raw.decode()
    assert metric_value(text, "akka_optimize_training_run_active", run_phase="TRAINING") == 1
    assert metric_value(text, "akka_optimize_training_pool_devices_claimed", claim_state="GRANTED") == 1
    assert metric_value(text, "akka_optimize_training_workload_devices_claimed", workload="triage",
                        claim_state="GRANTED") == 1
    d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    d.wait_phase(run["runId"], "CANCELLED")


def test_a_failing_job_fails_the_run_with_its_reason_first(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(failReason="dataset row 3 has no assistant message\ndetails follow")
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    failed = d.wait_phase(run["runId"], {"FAILED", "COMPLETED"})
    assert failed["phase"] == "FAILED" and failed["outcome"] == "FAILED"
    assert failed["failureReason"].splitlines()[0] == "dataset row 3 has no assistant message"
    # Its own verdict: never retried.
    assert failed["attempt"] == 1 and [a["cause"] for a in failed["attempts"]] == ["failed"], failed["attempts"]
    assert d.claims_of(run["runId"]) == []
    text = d.get("/metrics").raw.decode()
    assert metric_value(text, "akka_optimize_training_run_failures_total", run_phase="TRAINING") == 1


def test_a_job_that_exits_without_an_outcome_is_a_named_failure(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(exitCode=3)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(max_attempts=1)), 201)  # no retry: the attempt's reason is the run's
    failed = d.wait_phase(run["runId"], {"FAILED", "COMPLETED"})
    assert failed["phase"] == "FAILED"
    assert failed["failureReason"].splitlines()[0] == \
        "the training job exited with code 3 without reporting an outcome"
    assert "exiting without an outcome" in failed["failureReason"]


def test_a_job_that_keeps_dying_fails_the_run_naming_every_attempt(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(exitCode=3)
    d = start_trainerd(limits={"attemptBackoffSeconds": 0})
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)  # execution.maxAttempts: the default, 3
    failed = d.wait_phase(run["runId"], {"FAILED", "COMPLETED"})
    assert failed["phase"] == "FAILED" and failed["attempt"] == 3, failed
    assert failed["failureReason"].startswith(
        "all 3 attempts (execution.maxAttempts 3) ended without an outcome: attempt 1: crashed, code 3; "
        "attempt 2: crashed, code 3; attempt 3: crashed, code 3\nthe last one: the training job exited with code 3 "
        "without reporting an outcome"), failed["failureReason"]
    attempts = failed["attempts"]
    assert [(a["number"], a["cause"], a["exitCode"]) for a in attempts] == [(n, "crashed", 3) for n in (1, 2, 3)]
    assert all(a["ended"] and a["resumedFromSnapshot"] is None for a in attempts), attempts  # nothing saved
    events = d.ok(d.get(f"/v1/runs/{run['runId']}/events"), 200)["events"]
    assert [(e["attempt"], e["nextAttempt"]) for e in events if e["type"] == "attempt"] == [(1, 2), (2, 3)]
    assert d.claims_of(run["runId"]) == []  # the claim was kept across attempts, and released at the end


def test_submission_id_makes_a_repeated_submit_take_effect_once(start_trainerd, setup_basics):
    d = start_trainerd()
    setup_basics(d)
    first = d.post("/v1/runs", plan(submissionId="sub-1"))
    again = d.post("/v1/runs", plan(submissionId="sub-1"))
    assert first.status == 201 and again.status == 200
    assert again.json["runId"] == first.json["runId"]
    other = d.post("/v1/runs", plan(submissionId="sub-1", description="another plan"))
    assert other.status == 409 and other.json["error"]["field"] == "submissionId"
    assert d.ok(d.get("/v1/runs"), 200)["total"] == 1


def test_dry_run_resolves_and_creates_nothing(start_trainerd, setup_basics):
    d = start_trainerd()
    _, ds = setup_basics(d)
    r = d.ok(d.post("/v1/runs?dryRun=true", plan()), 200)
    assert r["plan"]["config"]["dataset"] == ds["hash"]
    assert r["plan"]["config"]["hyperparams"]["optimizer"]["learningRate"] == 1e-4
    assert d.ok(d.get("/v1/runs"), 200)["total"] == 0


def test_a_job_that_cannot_start_fails_the_run_by_name(start_trainerd, setup_basics, tmp_path):
    d = start_trainerd(job=str(tmp_path / "no-such-trainer-job"))
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    failed = d.wait_phase(run["runId"], {"FAILED", "COMPLETED"})
    assert failed["phase"] == "FAILED"
    lines = failed["failureReason"].splitlines()
    assert lines[0] == "the backend could not start the training job"
    assert "no-such-trainer-job is not executable" in lines[1]
    assert [p["phase"] for p in failed["phaseHistory"]] == ["SIZING_DATASET", "SUBMITTING", "FAILED"]
    assert d.claims_of(run["runId"]) == []
    text = d.get("/metrics").raw.decode()
    assert metric_value(text, "akka_optimize_training_run_failures_total", run_phase="SUBMITTING") == 1


def test_the_events_long_poll_returns_when_an_event_arrives(start_trainerd, setup_basics, standin_behaviour):
    import time
    standin_behaviour(queueSeconds=1.0, steps=1)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=1)), 201)
    queued = d.wait_phase(run["runId"], "QUEUED")
    seen = d.ok(d.get(f"/v1/runs/{run['runId']}/events"), 200)["events"]
    started = time.time()
    more = d.ok(d.get(f"/v1/runs/{run['runId']}/events?after={seen[-1]['seq']}&waitSeconds=30"), 200)
    assert time.time() - started < 20
    assert more["events"] and more["events"][0]["seq"] == seen[-1]["seq"] + 1
    assert more["run"]["runId"] == queued["runId"]
    bad = d.get(f"/v1/runs/{run['runId']}/events?waitSeconds=61")
    assert bad.status == 400 and bad.json["error"]["field"] == "waitSeconds"


def test_annotating_or_renaming_shows_in_lists_of_ended_runs(start_trainerd, setup_basics):
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(description="first", configName="r4")), 201)
    d.wait_phase(run["runId"], "COMPLETED")
    assert d.ok(d.get("/v1/runs"), 200)["runs"][0]["description"] == "first"
    d.ok(d.request("PATCH", f"/v1/runs/{run['runId']}", {"description": "second", "configName": ""}), 200)
    listed = d.ok(d.get("/v1/runs?phase=COMPLETED"), 200)["runs"][0]
    assert listed["description"] == "second" and "configName" not in listed
    d.ok(d.request("PATCH", "/v1/workloads/triage", {"name": "renamed"}), 200)
    assert d.ok(d.get("/v1/runs"), 200)["runs"][0]["workload"]["name"] == "renamed"
    assert d.ok(d.get("/v1/runs"), 200)["runs"][0] == d.run(run["runId"])
