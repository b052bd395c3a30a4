"""Pause and resume as durable service operations (issue 11), with the stand-in job playing the
job's side of the protocol (SIGUSR1: save, publish through the real catalog, `paused`): PAUSING,
then PAUSED with the claim released; a resume is a new attempt restoring the snapshot; a failed
save is recorded by name, never as success; a trainerd killed mid-pause finishes it after a
restart, and nothing is committed twice."""
import functools
import json
import signal
import time

import waiting
from service_helpers import plan

wait_for = functools.partial(waiting.wait_for, timeout=60.0, interval=0.05)


def released(d, run_id):
    run = d.run(run_id)
    return run if run["phase"] == "PAUSED" and run["pause"]["resourcesReleased"] else None


def test_a_saved_pause_releases_the_devices_and_a_resume_continues_from_its_snapshot(
        start_trainerd, setup_basics, standin_behaviour, tmp_path):
    env_file = tmp_path / "env.json"
    standin_behaviour(steps=60, stepSeconds=0.05, envFile=str(env_file))
    d = start_trainerd()
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan()), 201)["runId"]
    wait_for(lambda: d.run(run_id)["progress"].get("step", 0) >= 3, what="step 3")
    bad = d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "soon"})
    assert bad.status == 400 and bad.json["error"]["field"] == "checkpoint", bad
    latest = d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "latest"})
    assert latest.status == 409 and "no committed snapshot" in latest.json["error"]["message"], latest
    accepted = d.ok(d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "save"}), 202)
    assert accepted["phase"] == "PAUSING" and accepted["pause"]["resourcesReleased"] is False
    again = d.ok(d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "save"}), 202)  # once
    assert again["pause"]["requestedAt"] == accepted["pause"]["requestedAt"]
    other = d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "latest"})
    assert other.status == 409, other

    run = wait_for(lambda: released(d, run_id), what="PAUSED with resources released")
    pause = run["pause"]
    assert pause["state"] == "paused" and pause["savedStep"] >= 3, pause
    assert d.claims_of(run_id) == [] and "claim" not in run
    assert [p["phase"] for p in run["phaseHistory"]][-2:] == ["PAUSING", "PAUSED"]
    assert run["savedStep"] == pause["savedStep"] and run["savedSnapshot"] == pause["snapshotId"]
    snaps = d.ok(d.get(f"/v1/runs/{run_id}/snapshots"))["snapshots"]
    assert [s["snapshotId"] for s in snaps] == [pause["snapshotId"]]
    assert sorted(snaps[0]["artifacts"]) == ["trainingState", "weights"]
    cost_paused = run["cost"]["gpuSeconds"]
    assert cost_paused > 0
    first = json.loads(env_file.read_text())  # the paused attempt's identity
    as_first = {"X-Trainer-Job": first["TRAINER_JOB_ID"], "Authorization": "Bearer " + first["TRAINER_JOB_TOKEN"]}

    resumed = d.ok(d.post(f"/v1/runs/{run_id}/resume"), 202)
    assert resumed["attempt"] == 2
    d.ok(d.post(f"/v1/runs/{run_id}/resume"), 202)  # a repeated resume has its effect once
    done = d.wait_phase(run_id, {"COMPLETED", "FAILED"}, timeout=120)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")
    env = json.loads(env_file.read_text())
    assert env["TRAINER_ATTEMPT"] == "2" and env["TRAINER_RESUME_SNAPSHOT"] == pause["snapshotId"]
    steps = [s["step"] for s in d.ok(d.get(f"/v1/runs/{run_id}/metrics"))["steps"]]
    assert steps == list(range(1, 61))  # the resumed attempt continued after the saved step
    # The paused attempt is no longer the run's: its credentials may not change the catalog.
    stale = d.request("POST", f"/v1/snapshots/{pause['snapshotId']}/commit", {"kind": "weights"}, headers=as_first)
    assert stale.status == 403 and "current attempt" in stale.json["error"]["message"], stale
    assert stale.json["error"]["field"] == "X-Trainer-Job", stale
    assert done["cost"]["gpuSeconds"] > cost_paused  # attempts accumulate into the run

    metrics = d.get("/metrics").raw.decode()
    pause_lines = [line for line in metrics.splitlines() if 'akka_optimize_training_service_operation="pause"' in line]
    for stage in ("accept", "acknowledge_save", "release"):
        assert any(f'akka_optimize_training_service_stage="{stage}"' in line for line in pause_lines), stage
    assert 'akka_optimize_training_service_operation_duration_seconds_count{' in metrics


def test_a_failed_save_is_recorded_by_name_and_never_reported_as_success(start_trainerd, setup_basics,
                                                                          standin_behaviour):
    standin_behaviour(steps=400, stepSeconds=0.05, pauseFail="disk full while saving")
    d = start_trainerd()
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan()), 201)["runId"]
    d.wait_phase(run_id, "TRAINING")
    d.ok(d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "save"}), 202)
    run = d.wait_phase(run_id, {"FAILED", "PAUSED"})
    # No earlier restorable snapshot: the run fails, saying why; the pause never claims success.
    assert run["phase"] == "FAILED", run
    assert "the save failed: disk full while saving" in run["failureReason"]
    assert run["pause"]["state"] != "paused" and "disk full" in run["pause"]["failureReason"]
    assert d.claims_of(run_id) == []
    assert 'akka_optimize_training_service_outcome="failure"' in d.get("/metrics").raw.decode()


def test_trainerd_killed_during_a_pause_finishes_it_after_a_restart(start_trainerd, setup_basics,
                                                                     standin_behaviour):
    standin_behaviour(steps=400, stepSeconds=0.05, pauseDelay=1.0)
    d = start_trainerd()
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan()), 201)["runId"]
    wait_for(lambda: d.run(run_id)["progress"].get("step", 0) >= 2, what="step 2")
    d.ok(d.post(f"/v1/runs/{run_id}/pause", {"checkpoint": "save"}), 202)
    port = int(d.url.rsplit(":", 1)[1])
    d.kill(signal.SIGKILL)  # the job saves and calls back a trainerd that is gone
    time.sleep(1.5)
    d.start(port=port)
    run = wait_for(lambda: released(d, run_id), timeout=90, what="PAUSED after the restart")
    assert run["pause"]["state"] == "paused"
    snaps = d.ok(d.get(f"/v1/runs/{run_id}/snapshots"))
    assert snaps["total"] == 1 and snaps["snapshots"][0]["snapshotId"] == run["pause"]["snapshotId"]
    assert d.claims_of(run_id) == []
