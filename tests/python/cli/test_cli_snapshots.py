"""Snapshots end to end: the real job stages and publishes each save through the real trainerd's
catalog into its artifact folder; `trainer runs snapshots` and `trainer snapshots get` read it."""
from __future__ import annotations

import hashlib
import json
import urllib.request

import pytest

from cli_support import (call, cancel_run, job_credentials, plan_text, snapshot_id, start_run, start_run_id,
                         weights_reservation)

pytestmark = pytest.mark.timeout(1200)  # its runs are waited for up to 1000 s each (start)

PAYLOAD = b"adapter bytes"  # the one file of the weights the tests reserve and commit by hand


def plan(max_steps: int, save_every: int | None = None) -> str:
    # Every training state kept: retention (test_cli_lineage.py) would delete older ones.
    return plan_text(max_steps, save_every=save_every, keep_training_states=100 if save_every else None)


def test_each_save_and_the_end_leave_a_committed_snapshot(ready, trainerd):
    run = start_run(ready, plan(5, save_every=2), "--wait")
    assert run["phase"] == "COMPLETED", run
    run_id = run["runId"]
    listed = ready.json("runs", "snapshots", run_id[:8])
    steps = [s["savedStep"] for s in listed["snapshots"]]
    assert steps == [5, 4, 2], listed  # every saveEvery, and the final one; newest first
    assert listed["total"] == 3
    for s in listed["snapshots"]:
        # Weights and training state, each committed.
        assert sorted(s["artifacts"]) == ["trainingState", "weights"] and s["status"] == "Available", s
        digests = {}
        for name, kind in s["kinds"].items():
            # The stored manifest is the one committed, and the id derives from them.
            manifest_bytes = (trainerd.data_dir / kind["location"] / "manifest.json").read_bytes()
            assert hashlib.sha256(manifest_bytes).hexdigest() == kind["manifestDigest"]
            digests[name] = kind["manifestDigest"]
            manifest = json.loads(manifest_bytes)
            for f in manifest["files"]:
                payload = (trainerd.data_dir / kind["location"] / f["path"]).read_bytes()
                assert len(payload) == f["bytes"] and hashlib.sha256(payload).hexdigest() == f["sha256"]
        assert s["snapshotId"] == snapshot_id(run_id, s["savedStep"], digests)
    # The final snapshot holds the final adapter's bytes.
    final = listed["snapshots"][0]
    final_dir = trainerd.data_dir / final["kinds"]["weights"]["location"]
    assert (final_dir / "adapter_model.safetensors").read_bytes() == \
        (trainerd.data_dir / "runs" / run_id / "attempt-1" / "output" / "adapter" /
         "adapter_model.safetensors").read_bytes()

    text = ready("runs", "snapshots", run_id[:8], check=True).stdout
    assert "SAVED STEP" in text and "HELD BY" in text and final["snapshotId"][:12] in text
    paged = ready.json("runs", "snapshots", run_id, "--limit", "1", "--offset", "1")
    assert [s["savedStep"] for s in paged["snapshots"]] == [4] and paged["nextOffset"] == 2

    got = ready.json("snapshots", "get", final["snapshotId"][:12])
    assert got["snapshotId"] == final["snapshotId"] and got["runId"] == run_id and got["savedStep"] == 5
    assert got["kinds"]["weights"]["state"] == "committed"
    assert "Saved step" in ready("snapshots", "get", final["snapshotId"][:12], check=True).stdout
    missing = ready("snapshots", "get", "ffffffffffff")
    assert missing.returncode == 1 and "no snapshot" in missing.stderr

    # The run shows its newest snapshot and restorable state; the job's checkpoint metrics reached /metrics.
    got_run = ready.json("runs", "get", run_id)
    assert got_run["latestSnapshot"]["snapshotId"] == final["snapshotId"] and got_run["savedStep"] == 5
    with urllib.request.urlopen(trainerd.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    assert 'akka_optimize_training_checkpoint_duration_seconds_count{' in metrics
    for op in ("stage", "reserve", "upload", "acknowledge", "publish"):
        assert f'akka_optimize_training_checkpoint_operation="{op}"' in metrics, op
    assert "akka_optimize_training_checkpoint_publication_pending" in metrics
    assert "akka_optimize_training_checkpoint_transfer_size_bytes" in metrics
    assert 'akka_optimize_training_service_operation="commit_snapshot"' in metrics


def test_the_catalog_refuses_a_tampered_upload_and_lists_no_reservation(ready, trainerd):
    """The job's callbacks, driven by hand against a running run: a manifest or payload that
    does not match the reservation is refused at verification; a reservation is never listed."""
    run_id = start_run_id(ready, plan(100000))
    try:
        job, (sid, body, text) = job_credentials(trainerd, run_id), weights_reservation(run_id, 7, PAYLOAD)
        bad = dict(body, snapshotId="0" * 64)
        status, err = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", bad, job)
        assert status == 400 and err["error"]["field"] == "snapshotId", err
        status, reserved = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
        assert status == 201 and reserved["status"] == "Reserved", reserved
        status, again = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
        assert status == 200 and again["snapshotId"] == sid  # idempotent

        folder = trainerd.data_dir / "snapshots" / sid / "weights"
        folder.mkdir(parents=True)
        (folder / "a.bin").write_bytes(b"adapter bytez")  # corrupted payload, same size
        (folder / "manifest.json").write_bytes(text)
        status, err = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 400 and "fails its digest" in err["error"]["message"], err
        (folder / "manifest.json").write_bytes(text.replace(b'"engineStep":7', b'"engineStep":8'))
        status, err = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 400 and "reserved digest" in err["error"]["message"], err
        assert ready.json("runs", "snapshots", run_id)["snapshots"] == []
        assert ready("snapshots", "get", sid).returncode == 1

        (folder / "manifest.json").write_bytes(text)
        (folder / "a.bin").write_bytes(PAYLOAD)
        status, committed = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 200 and committed["artifacts"] == ["weights"], committed
        status, twice = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 200 and twice == committed
        assert [s["snapshotId"] for s in ready.json("runs", "snapshots", run_id)["snapshots"]] == [sid]
        status, err = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "trainingState"}, job)
        assert status == 400 and err["error"]["field"] == "kind"
    finally:
        cancel_run(ready, run_id)
    status, err = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
    assert status == 409, err  # an ended run takes no new snapshots


def test_the_catalog_takes_a_jobs_callbacks_only_from_the_runs_current_attempt(ready, trainerd):
    """Reserve and commit carry the attempt's credentials (X-Trainer-Job, Authorization: Bearer):
    none, a wrong token or an unknown attempt is a 401 naming the header at fault, another run's
    attempt a 403; a refused callback reserves and commits nothing."""
    other = start_run(ready, plan(1), "--wait")
    assert other["phase"] == "COMPLETED", other
    others_job = job_credentials(trainerd, other["runId"])  # a real attempt with its real token
    run_id = start_run_id(ready, plan(100000))
    try:
        job, (sid, body, text) = job_credentials(trainerd, run_id), weights_reservation(run_id, 3, PAYLOAD)
        refusals = [
            ({}, 401, "X-Trainer-Job"),
            ({"X-Trainer-Job": job["X-Trainer-Job"]}, 401, "Authorization"),
            (dict(job, Authorization="Bearer " + "0" * 64), 401, "Authorization"),
            (dict(job, Authorization="Basic " + job["Authorization"][len("Bearer "):]), 401, "Authorization"),
            (dict(job, **{"X-Trainer-Job": run_id + "-9"}), 401, "X-Trainer-Job"),
            (others_job, 403, "X-Trainer-Job"),
        ]

        def refused(url, request_body, what):
            for headers, code, field in refusals:
                status, err = call(url, "POST", request_body, headers)
                assert status == code, (what, headers, err)
                assert err["error"]["code"] == ("invalid_argument" if code == 401 else "failed_precondition"), err
                assert err["error"]["field"] == field, err
                if code == 403:
                    assert other["runId"] in err["error"]["message"] and run_id in err["error"]["message"], err

        listed = ready.json("runs", "snapshots", run_id)
        refused(f"{trainerd.url}/v1/runs/{run_id}/snapshots", body, "reserve")
        assert ready.json("runs", "snapshots", run_id) == listed
        # Nothing was reserved: the job's own reservation is new.
        status, reserved = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
        assert status == 201 and reserved["status"] == "Reserved", reserved

        folder = trainerd.data_dir / "snapshots" / sid / "weights"
        folder.mkdir(parents=True)
        (folder / "a.bin").write_bytes(PAYLOAD)
        (folder / "manifest.json").write_bytes(text)
        refused(f"{trainerd.url}/v1/snapshots/{sid}/commit", {"kind": "weights"}, "commit")
        assert ready.json("runs", "snapshots", run_id) == listed
        assert ready("snapshots", "get", sid).returncode == 1  # still a reservation, not a snapshot
        status, committed = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 200 and committed["artifacts"] == ["weights"], committed
        assert [s["snapshotId"] for s in ready.json("runs", "snapshots", run_id)["snapshots"]] == [sid]
        # The run's attempt may not commit into the other run's snapshots either.
        theirs = ready.json("runs", "snapshots", other["runId"])["snapshots"][0]["snapshotId"]
        status, err = call(f"{trainerd.url}/v1/snapshots/{theirs}/commit", "POST", {"kind": "weights"}, job)
        assert status == 403 and err["error"]["code"] == "failed_precondition", err
    finally:
        cancel_run(ready, run_id)


def test_pause_and_resume_refuse_what_they_cannot_do(ready):
    missing = ready("runs", "pause", "abc")
    assert missing.returncode == 2 and "--checkpoint is required" in missing.stderr
    wrong = ready("runs", "pause", "abc", "--checkpoint", "now")
    assert wrong.returncode == 2 and "save or latest" in wrong.stderr
    run = start_run(ready, plan(100000))
    run_id = run["runId"]
    try:
        # No committed training state yet: `latest` would restart from the base model.
        latest = ready("runs", "pause", run_id, "--checkpoint", "latest")
        assert latest.returncode == 1 and "no committed snapshot with training state" in latest.stderr, latest.stderr
        resume = ready("runs", "resume", run_id)
        assert resume.returncode == 1 and "not PAUSED" in resume.stderr, resume.stderr
    finally:
        cancel_run(ready, run_id, wait=False)
    done = start_run(ready, plan(1), "--wait")
    ended = ready("runs", "pause", done["runId"], "--checkpoint", "save")
    assert ended.returncode == 1 and "only an active run can pause" in ended.stderr, ended.stderr
