"""The object store stopped in the middle of a run's uploads (issue 11): a real SeaweedFS `weed`
killed while a real job publishes its snapshots to it through a real trainerd. The job retries
each publication within `limits.publishDeadlineSeconds`, then that publication ends with the
storage failure reason (logged and counted), and training goes on. With the store started again
on the same address and data, later saves publish: a pause's save commits and the run pauses.
Nothing half published is ever listed."""
from __future__ import annotations

import os
import re
import time
import urllib.request

import pytest

from cli_support import DATASET_NAME, MODEL_NAME, WORKLOAD, start_trainerd, stop, wait_for
from s3_server import restart_s3_server, start_s3_server, stop_s3_server

DEADLINE_SECONDS = 3
SAVE_EVERY = 10


@pytest.fixture(scope="module")
def s3(tmp_path_factory):
    box = {"server": start_s3_server(tmp_path_factory.mktemp("weed"))}
    yield box
    stop_s3_server(box["server"].proc)


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory, s3):
    os.environ["TRAINER_TEST_S3_KEY"] = s3["server"].access_key
    os.environ["TRAINER_TEST_S3_SECRET"] = s3["server"].secret_key
    store = {"uri": "s3://trainer-artifacts/outage", "endpoint": s3["server"].endpoint,
             "accessKeyEnv": "TRAINER_TEST_S3_KEY", "secretKeyEnv": "TRAINER_TEST_S3_SECRET"}
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], "artifactStore": store,
                              "limits": {"publishDeadlineSeconds": DEADLINE_SECONDS}})
    yield service
    stop(service.proc, service.data_dir)


def plan() -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:", f"  dataset: {DATASET_NAME}",
        "  hyperparams:", "    optimizer: {learningRate: 0.003}", "    training: {maxSteps: 100000, batchSize: 4}",
        "  maxSeqLength: 128", "  model: {precision: FP32}",
        f"execution: {{gpus: 0, saveEvery: {SAVE_EVERY}, keepAdapters: 1000, keepTrainingStates: 1000}}", ""])


def test_a_store_outage_fails_publications_by_reason_and_publication_catches_up(ready, trainerd, s3):
    run_id = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan(), check=True).stdout.strip()
    wait_for(lambda: ready.json("runs", "snapshots", run_id)["snapshots"], 300, "a first committed snapshot")
    job_log = trainerd.data_dir / "runs" / run_id / "attempt-1" / "job.log"

    stop_s3_server(s3["server"].proc)  # mid-run: the job's next uploads find nothing there
    gave_up = wait_for(lambda: re.search(r"publishing snapshot ([0-9a-f]{12}) \(step (\d+)\) failed: (.*)",
                                         job_log.read_text(errors="replace")),
                       120, "a publication to give up after its deadline")
    lost_id, lost_step = gave_up.group(1), int(gave_up.group(2))
    # Given up (the S3 client's retries and the publisher's ran out of the deadline) naming the store.
    assert f"s3 {s3['server'].endpoint}/trainer-artifacts/outage did not answer" in gave_up.group(3), gave_up.group(3)
    assert ready.json("runs", "get", run_id)["phase"] == "TRAINING"  # training goes on

    s3["server"] = restart_s3_server(s3["server"])
    caught_up = wait_for(lambda: [s for s in ready.json("runs", "snapshots", run_id)["snapshots"]
                                  if s["savedStep"] > lost_step], 300, "a save after the outage to commit")
    assert caught_up

    # A pause's save commits as well (the earlier failed publication does not stand in its way).
    ready("runs", "pause", run_id, "--checkpoint", "save", check=True)
    paused = wait_for(lambda: (r := ready.json("runs", "get", run_id))["phase"] in ("PAUSED", "FAILED") and r,
                      300, "the pause")
    assert paused["phase"] == "PAUSED", paused
    listed = ready.json("runs", "snapshots", run_id, "--limit", 100)["snapshots"]
    assert paused["pause"]["snapshotId"] in [s["snapshotId"] for s in listed]
    # Nothing half published: the one given up is absent, every listed one has each kind it reserved.
    assert not [s for s in listed if s["snapshotId"].startswith(lost_id)], listed
    for s in listed:
        assert sorted(s["artifacts"]) == sorted(s["kinds"]) and "weights" in s["artifacts"], s

    # The failure is counted with its reason, on the object-storage transport.
    with urllib.request.urlopen(trainerd.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    failed = [line for line in text.splitlines() if 'checkpoint_failure_reason="storage"' in line
              and 'checkpoint_operation="publish"' in line and run_id in line]
    assert failed and all('checkpoint_storage_mode="object_storage"' in line for line in failed), failed[:3]
    ready("runs", "cancel", run_id, "--force", check=True)
