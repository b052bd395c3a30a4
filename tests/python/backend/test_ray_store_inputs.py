"""A Ray job's inputs through the S3 artifact store (issue 13): a real trainerd on the Ray backend
(the session's real Ray head) whose `artifactStore` is the session's real SeaweedFS `weed`. Before
it submits a job, trainerd stages the base model folder and the dataset file in the bucket
(inputs/models/SHA, inputs/datasets/SHA.jsonl), once; the job's plan names s3:// URIs, and
trainer-job fetches them into its node's cache, checks their content hashes and trains from the
copies: the same losses, bit for bit, as the same plan on Ray reading trainerd's data folder. The
job refuses a copy whose hash differs, and names the store it cannot reach."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess

import pytest

from backend_support import Service
from clusters import free_port
from store_support import bucket_objects, job_log, job_plan, losses, staged_lines

BUCKET = "trainer-ray-inputs"
PREFIX = "cluster"
ROOT = f"s3://{BUCKET}/{PREFIX}"


def ray_config(ray_head) -> dict:
    return {"compute": {"backend": "ray", "ray": {"address": ray_head.address}},
            "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}]}


@pytest.fixture(scope="module")
def store_service(bin_dir, tiny_model, tmp_path_factory, ray_head, s3_server):
    os.environ["TRAINER_TEST_S3_KEY"] = s3_server.access_key
    os.environ["TRAINER_TEST_S3_SECRET"] = s3_server.secret_key
    tmp = tmp_path_factory.mktemp("ray-store")
    svc = Service(bin_dir, tmp, tiny_model, {
        **ray_config(ray_head),
        "artifactStore": {"uri": ROOT, "endpoint": s3_server.endpoint, "accessKeyEnv": "TRAINER_TEST_S3_KEY",
                          "secretKeyEnv": "TRAINER_TEST_S3_SECRET", "inputCache": str(tmp / "node-cache")},
    }).ready()
    yield svc
    svc.close()


@pytest.fixture(scope="module")
def host_paths_losses(bin_dir, tiny_model, tmp_path_factory, ray_head) -> dict:
    """The reference: the same plan on the same Ray head, its job reading trainerd's data folder."""
    svc = Service(bin_dir, tmp_path_factory.mktemp("ray-host"), tiny_model, ray_config(ray_head)).ready()
    try:
        run_id = svc.start(max_steps=3)["runId"]
        svc.wait_phase(run_id, "COMPLETED")
        plan = job_plan(svc, run_id)
        assert plan["baseModel"].startswith(str(svc.daemon.data_dir)), plan["baseModel"]
        return losses(svc, run_id)
    finally:
        svc.close()


@pytest.fixture(scope="module")
def first_run(store_service) -> str:
    """The module's first run on Ray with the store: it stages the inputs."""
    run_id = store_service.start(max_steps=3)["runId"]
    store_service.wait_phase(run_id, "COMPLETED")
    return run_id


def test_a_ray_job_trains_from_inputs_staged_once_in_the_store(store_service, first_run, tiny_model, s3_server,
                                                             host_paths_losses):
    svc = store_service
    first = first_run
    done = svc.get(first)
    assert done["placement"]["backend"] == "ray"
    model_sha, dataset_sha = done["baseModelHash"], done["dataset"]["hash"]

    # The job's plan names the store, and nothing in trainerd's data folder.
    plan = job_plan(svc, first)
    assert plan["baseModel"] == f"{ROOT}/inputs/models/{model_sha}"
    assert plan["config"]["dataset"] == f"{ROOT}/inputs/datasets/{dataset_sha}.jsonl"
    assert str(svc.daemon.data_dir) not in json.dumps(plan)

    # The bucket holds both inputs, the model folder committed with every file of the model.
    objects = bucket_objects(s3_server, BUCKET, f"{PREFIX}/inputs/")
    model_files = sorted(p.relative_to(tiny_model).as_posix() for p in tiny_model.rglob("*") if p.is_file())
    assert sorted(k.split(f"inputs/models/{model_sha}/", 1)[1] for k in objects if "/inputs/models/" in k) == \
        sorted(model_files + [".trainer-folder"])
    assert f"{PREFIX}/inputs/datasets/{dataset_sha}.jsonl" in objects
    assert sorted(staged_lines(svc)) == sorted([f"inputs/models/{model_sha}",
                                                f"inputs/datasets/{dataset_sha}.jsonl"])

    # The job fetched both into its node's cache, verified, and trained from the copies.
    log = job_log(svc, first)
    assert f"baseModel {plan['baseModel']}: fetched" in log and "(content hash checked)" in log, log[-3000:]
    assert f"config.dataset {plan['config']['dataset']}: fetched" in log, log[-3000:]
    cache = svc.tmp / "node-cache"
    for name in model_files:
        assert (cache / "models" / model_sha / name).read_bytes() == (tiny_model / name).read_bytes()
    assert [m["step"] for m in svc.metrics(first)] == [1, 2, 3]
    assert losses(svc, first) == host_paths_losses  # bit for bit

    # A second run stages nothing again: the same objects, untouched; its job reuses the cache.
    second = svc.start(max_steps=3)["runId"]
    svc.wait_phase(second, "COMPLETED")
    assert bucket_objects(s3_server, BUCKET, f"{PREFIX}/inputs/") == objects
    assert len(staged_lines(svc)) == 2
    assert job_plan(svc, second)["baseModel"] == plan["baseModel"]
    assert f"baseModel {plan['baseModel']}: reusing the verified copy" in job_log(svc, second)
    assert losses(svc, second) == host_paths_losses


def run_job(bin_dir: pathlib.Path, tmp: pathlib.Path, plan: dict, env: dict) -> tuple[int, list[dict], str]:
    """trainer-job run on `plan` outside any cluster: exit code, events, standard error."""
    (tmp / "plan.json").write_text(json.dumps(plan))
    out = subprocess.run([str(bin_dir / "trainer-job"), "run", "--plan", str(tmp / "plan.json"),
                          "--output", str(tmp / "out"), "--events", str(tmp / "events.jsonl")],
                         env={**os.environ, **env}, capture_output=True, text=True, timeout=300)
    events = [json.loads(line) for line in (tmp / "events.jsonl").read_text().splitlines() if line.strip()]
    return out.returncode, events, out.stderr


def s3_put(s3, tmp: pathlib.Path, key: str, body: bytes) -> None:
    (tmp / "body").write_bytes(body)
    out = subprocess.run(["curl", "-sf", "-T", str(tmp / "body"), "--aws-sigv4", "aws:amz:us-east-1:s3",
                          "--user", f"{s3.access_key}:{s3.secret_key}", f"{s3.endpoint}/{BUCKET}/{PREFIX}/{key}"],
                         capture_output=True, timeout=60)
    assert out.returncode == 0, f"PUT {key} failed: curl exit {out.returncode}"


def test_the_job_refuses_an_input_whose_bytes_differ_from_its_hash(store_service, first_run, bin_dir, s3_server, tmp_path):
    plan = job_plan(store_service, first_run)
    # Other rows under a dataset key whose name is the hash of rows nobody stored.
    forged = "0" * 64
    s3_put(s3_server, tmp_path, f"inputs/datasets/{forged}.jsonl", b'{"messages": []}\n')
    plan["config"]["dataset"] = f"{ROOT}/inputs/datasets/{forged}.jsonl"
    env = {**s3_server.env(), "TRAINER_ARTIFACT_ROOT": ROOT, "TRAINER_INPUT_CACHE": str(tmp_path / "cache")}
    code, events, _ = run_job(bin_dir, tmp_path, plan, env)
    assert code == 1
    reason = events[-1]["reason"]
    assert events[-1]["type"] == "failed"
    assert reason.startswith(f"config.dataset {ROOT}/inputs/datasets/{forged}.jsonl: the fetched copy's content hash is ")
    assert not (tmp_path / "cache" / "datasets" / f"{forged}.jsonl").exists()  # nothing unverified is kept
    assert not [p for p in (tmp_path / "cache").iterdir() if p.name.startswith(".partial-")]


def test_the_job_names_the_store_it_cannot_reach_and_the_input(store_service, first_run, bin_dir, s3_server, tmp_path):
    plan = job_plan(store_service, first_run)
    closed = f"http://127.0.0.1:{free_port()}"
    env = {**s3_server.env(), "TRAINER_S3_ENDPOINT": closed, "TRAINER_S3_DEADLINE_SECONDS": "2",
           "TRAINER_ARTIFACT_ROOT": ROOT, "TRAINER_INPUT_CACHE": str(tmp_path / "empty-cache")}
    code, events, _ = run_job(bin_dir, tmp_path, plan, env)
    assert code == 1
    assert events[-1]["type"] == "failed"
    reason = events[-1]["reason"]
    assert reason.startswith(f"baseModel {plan['baseModel']}: cannot reach the artifact store {ROOT}: "), reason
    assert closed in reason, reason


def test_a_branch_on_ray_restores_its_parents_snapshot_from_the_store(store_service, first_run):
    svc = store_service
    source = svc.cli.json("runs", "snapshots", first_run)["snapshots"][0]
    child = svc.cli.json("runs", "branch", first_run, "--snapshot", source["snapshotId"], "--steps", "2")["runId"]
    done = svc.wait_phase(child, "COMPLETED")
    assert done["placement"]["backend"] == "ray"
    log = job_log(svc, child)
    assert f"starting from weights of snapshot {source['snapshotId']}" in log, log[-3000:]
    assert "reusing the verified copy" in log, log[-3000:]  # the node's cache from the parent's job
    assert job_plan(svc, child)["baseModel"] == job_plan(svc, first_run)["baseModel"]
    assert [m["step"] for m in svc.metrics(child)] == [1, 2]
