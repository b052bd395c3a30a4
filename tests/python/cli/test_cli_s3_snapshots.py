"""Snapshots in an S3-compatible object store (issue 11), end to end: a real trainerd whose
`artifactStore` is a real SeaweedFS `weed` on loopback (it checks every SigV4 signature), real
jobs through `trainer runs start`. Each save is published to the bucket (not the data folder)
and committed by the catalog after it read the upload back from S3; a run paused and resumed
restores its state from S3 and trains exactly as the run that was never paused; a wrong secret
stops trainerd's start at the step that names it."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import time

import pytest

from cli_support import MODEL_NAME, Cli, losses, plan_text, start_run_id, start_trainerd, stop, wait_paused, wait_step
from s3_server import start_s3_server, stop_s3_server

BUCKET = "trainer-artifacts"
PREFIX = "e2e"
STEPS = 8


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    server = start_s3_server(tmp_path_factory.mktemp("weed"))
    yield server
    stop_s3_server(server.proc)


def store_config(s3, secret_env: str = "TRAINER_TEST_S3_SECRET") -> dict:
    return {"uri": f"s3://{BUCKET}/{PREFIX}", "endpoint": s3.endpoint, "accessKeyEnv": "TRAINER_TEST_S3_KEY",
            "secretKeyEnv": secret_env}


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory, s3):
    os.environ["TRAINER_TEST_S3_KEY"] = s3.access_key
    os.environ["TRAINER_TEST_S3_SECRET"] = s3.secret_key
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                              "artifactStore": store_config(s3)})
    yield service
    stop(service.proc, service.data_dir)


def plan() -> str:  # retention keeps every save
    return plan_text(STEPS, save_every=2, keep_adapters=100, keep_training_states=100)


def s3_get(s3, key: str) -> bytes:
    out = subprocess.run(["curl", "-sf", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                          f"{s3.access_key}:{s3.secret_key}", f"{s3.endpoint}/{BUCKET}/{PREFIX}/{key}"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, f"GET {key} from S3 failed: curl exit {out.returncode}"
    return out.stdout


@pytest.fixture(scope="module")
def reference(ready):
    run_id = start_run_id(ready, plan())
    ready("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True)
    return run_id


def test_trainerd_connects_to_the_store_at_start(ready, s3):
    info = ready.json("info")
    steps = {s["name"]: s for s in info["startup"]["steps"]}
    assert steps["connect artifact store"]["ok"], steps
    assert info["artifactStore"] == f"s3 {s3.endpoint}/{BUCKET}/{PREFIX}"


def test_every_save_is_published_to_s3_and_committed_after_the_catalog_read_it_back(ready, trainerd, s3, reference):
    listed = ready.json("runs", "snapshots", reference)
    assert [s["savedStep"] for s in listed["snapshots"]] == [8, 6, 4, 2], listed
    # A save made while uploads were behind may carry weights only (and says so); some hold both.
    assert any(sorted(s["artifacts"]) == ["trainingState", "weights"] for s in listed["snapshots"]), listed
    for snap in listed["snapshots"]:
        assert "weights" in snap["artifacts"] and snap["status"] == "Available", snap
        for kind in snap["kinds"].values():
            manifest = s3_get(s3, kind["location"] + "/manifest.json")
            assert hashlib.sha256(manifest).hexdigest() == kind["manifestDigest"]
            for f in json.loads(manifest)["files"]:
                payload = s3_get(s3, kind["location"] + "/" + f["path"])
                assert len(payload) == f["bytes"] and hashlib.sha256(payload).hexdigest() == f["sha256"]
            # In the bucket, not in trainerd's data folder.
            assert not (trainerd.data_dir / kind["location"]).exists()
    final = listed["snapshots"][0]
    adapter = s3_get(s3, final["kinds"]["weights"]["location"] + "/adapter_model.safetensors")
    run = ready.json("runs", "get", reference)
    assert adapter == (trainerd.data_dir / "runs" / reference / "attempt-1" / "output" / "adapter" /
                       "adapter_model.safetensors").read_bytes()
    assert run["latestSnapshot"]["snapshotId"] == final["snapshotId"]


def test_a_completed_run_registers_its_adapter_in_the_bucket(ready, trainerd, s3, reference):
    run = ready.json("runs", "get", reference)
    deadline = time.time() + 120
    while (model := ready.json("trained-models", "get", run["modelId"]))["status"] != "REGISTERED":
        assert model["status"] in ("PENDING", "COPYING") and time.time() < deadline, model
        time.sleep(0.2)
    key = f"registry/models/{run['modelId']}"
    assert model["artifact"] == {"key": key, "uri": f"s3://{BUCKET}/{PREFIX}/{key}"}
    final = ready.json("runs", "snapshots", reference)["snapshots"][0]
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert s3_get(s3, f"{key}/{name}") == s3_get(s3, final["kinds"]["weights"]["location"] + "/" + name)
    assert not (trainerd.data_dir / key).exists()


def test_a_paused_run_resumes_from_s3_and_trains_exactly_as_the_uninterrupted_one(ready, reference):
    run_id = start_run_id(ready, plan())
    wait_step(ready, run_id, 3)
    out = ready("runs", "pause", run_id, "--checkpoint", "save")
    assert out.returncode == 0, out.stderr
    paused = wait_paused(ready, run_id)
    assert 3 <= paused["pause"]["savedStep"] < STEPS
    out = ready("runs", "resume", run_id)
    assert out.returncode == 0 and "attempt 2" in out.stdout, out.stdout + out.stderr
    ready("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True)
    assert losses(ready, run_id) == losses(ready, reference)  # every step, bit for bit


def test_a_wrong_secret_stops_trainerds_start_naming_the_store(bin_dir, tiny_model, tmp_path, s3):
    os.environ["TRAINER_TEST_S3_WRONG"] = "not-the-secret"
    service = start_trainerd(bin_dir, tmp_path / "svc", {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                                                          "artifactStore": store_config(s3, "TRAINER_TEST_S3_WRONG")},
                             wait_ready=False)
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        out = cli("info")
        assert out.returncode != 0, out.stdout
        info = json.loads(cli("info", "-o", "json").stdout)
        assert info["startup"]["ready"] is False
        step = next(s for s in info["startup"]["steps"] if s["name"] == "connect artifact store")
        assert not step["ok"] and "refused the credentials" in step["message"] and "403" in step["message"], step
        assert f"s3://{BUCKET}/{PREFIX}" in step["message"]
    finally:
        stop(service.proc, service.data_dir)


def test_an_unset_key_variable_is_named(bin_dir, tiny_model, tmp_path, s3):
    os.environ.pop("TRAINER_TEST_S3_UNSET", None)
    service = start_trainerd(bin_dir, tmp_path / "svc", {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                                                          "artifactStore": store_config(s3, "TRAINER_TEST_S3_UNSET")},
                             wait_ready=False)
    try:
        info = json.loads(Cli(bin_dir / "trainer", service.url)("info", "-o", "json").stdout)
        step = next(s for s in info["startup"]["steps"] if s["name"] == "connect artifact store")
        assert not step["ok"] and "TRAINER_TEST_S3_UNSET" in step["message"], step
    finally:
        stop(service.proc, service.data_dir)
