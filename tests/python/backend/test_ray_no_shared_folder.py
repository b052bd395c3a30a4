"""A Ray run whose job shares no folder with trainerd (issue 23): trainerd's Ray backend with
`jobFolder` and an S3 artifact store (the session's real SeaweedFS `weed` and real Ray head).

How the job is kept from trainerd's data folder: trainer-job runs through a wrapper (the job
binary trainerd is given) that enters a private mount namespace (`unshare -m`) and mounts an empty
tmpfs over trainerd's data folder before it execs the real trainer-job, so the job sees an empty
folder there. The entrypoint carries the plan; the job works in the node folder `jobFolder`,
fetches its base model and dataset from the store, publishes its snapshots there, and posts its
events and log to trainerd's API. trainerd reads no file of the job: the events file it would
read (in its data folder) never exists, and the run completes with its metrics, log and adapter
(the final snapshot's storage key) all from the API and the store.
"""
from __future__ import annotations

import json
import os
import pathlib
import sqlite3

import subprocess

import pytest

import auth
from backend_support import Service
from cli_support import DATASET_NAME, MODEL_NAME, WORKLOAD
from store_support import bucket_objects, staged_lines
from waiting import wait_for

BUCKET = "trainer-ray-unshared"
ROOT = f"s3://{BUCKET}/cluster"


def hiding_wrapper(bin_dir: pathlib.Path, tmp: pathlib.Path, data_dir: pathlib.Path) -> pathlib.Path:
    """A folder like bin_dir whose trainer-job runs `run` with `data_dir` covered by an empty tmpfs."""
    wrapped = tmp / "bin"
    wrapped.mkdir()
    for name in ("trainerd", "trainer"):
        (wrapped / name).symlink_to(bin_dir / name)
    job = wrapped / "trainer-job"
    job.write_text(f"""#!/bin/sh
# The job's node: trainerd's data folder is not there. Tools trainerd runs beside itself pass through.
case "$1" in run|evaluate|serve) ;; *) exec {bin_dir / 'trainer-job'} "$@" ;; esac
exec unshare -m -- sh -c 'data=$1; real=$2; shift 2
mount -t tmpfs tmpfs "$data" || exit 1
echo "node: $data holds $(ls -A "$data" | wc -l) entries" >&2
exec "$real" "$@"' sh {data_dir} {bin_dir / 'trainer-job'} "$@"
""")
    job.chmod(0o755)
    return wrapped


@pytest.fixture(scope="module")
def unshared(bin_dir, tiny_model, tmp_path_factory, ray_head, s3_server):
    os.environ["TRAINER_TEST_S3_KEY"] = s3_server.access_key
    os.environ["TRAINER_TEST_S3_SECRET"] = s3_server.secret_key
    tmp = tmp_path_factory.mktemp("ray-unshared")
    wrapped = hiding_wrapper(bin_dir, tmp, tmp / "data")
    svc = Service(wrapped, tmp, tiny_model, {
        "compute": {"backend": "ray", "ray": {"address": ray_head.address, "jobFolder": str(tmp / "node-jobs")}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
        "artifactStore": {"uri": ROOT, "endpoint": s3_server.endpoint, "accessKeyEnv": "TRAINER_TEST_S3_KEY",
                          "secretKeyEnv": "TRAINER_TEST_S3_SECRET", "inputCache": str(tmp / "node-cache")},
    }).ready()
    yield svc
    svc.close()


def stored(svc: Service, table: str, job_id: str) -> list[tuple[int, str]]:
    db = sqlite3.connect(str(svc.daemon.data_dir / "state.db"))
    try:
        return db.execute(f"SELECT seq, doc FROM {table} WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        db.close()


def test_a_ray_run_whose_job_cannot_see_the_data_folder_completes_over_the_api(unshared):
    svc = unshared
    run_id = svc.start(max_steps=3)["runId"]
    done = svc.wait_phase(run_id, "COMPLETED", timeout=600)
    assert done["placement"]["backend"] == "ray"
    job_id = f"{run_id}-1"

    # The job saw an empty folder where trainerd's data is (the wrapper said so before trainer-job
    # started: in Ray's log of the job, which trainerd fetched from Ray's API when it ended). Its
    # own log arrived over trainerd's API: its progress lines and its inputs fetched from the store.
    attempt = svc.daemon.data_dir / "runs" / run_id / "attempt-1"
    assert f"node: {svc.daemon.data_dir} holds 0 entries" in (attempt / "job.log").read_text(errors="replace")
    log = [text for _, text in stored(svc, "job_logs", job_id)]
    assert any(line.startswith("step 3/3") for line in log), log
    assert any(line.startswith("trainer-job run: baseModel s3://") and "fetched" in line
               or "reusing the verified copy" in line for line in log), log

    # Its events file is on the node; the one trainerd would read never existed.
    assert not (attempt / "events.jsonl").exists()
    assert not (attempt / "output" / "adapter").exists()
    node_events = (svc.tmp / "node-jobs" / f"trainer-{run_id}-1" / "events.jsonl").read_text().splitlines()
    posted = stored(svc, "job_events", job_id)
    assert [seq for seq, _ in posted] == list(range(1, len(node_events) + 1))
    assert [json.loads(doc) for _, doc in posted] == [json.loads(line) for line in node_events]

    # The metrics arrived, and the adapter is the final snapshot's weights in the store.
    assert [m["step"] for m in svc.metrics(run_id)] == [1, 2, 3]
    snapshot = done["latestSnapshot"]["snapshotId"]
    assert done["adapterPath"] == f"snapshots/{snapshot}/weights"
    assert done.get("modelId")


def test_a_ray_evaluation_of_that_adapter_completes_without_the_data_folder(unshared):
    """An evaluation runs as a Ray job too (issue 23): its job cannot see trainerd's data folder
    either, fetches the base model, the rows and the run's adapter from the store, and reports
    its progress and report over the API."""
    svc = unshared
    run_id = svc.start(max_steps=2)["runId"]
    svc.wait_phase(run_id, "COMPLETED", timeout=600)
    out = svc.cli("evaluations", "start", "--model", run_id, "--dataset", DATASET_NAME, "--max-new-tokens", "4",
                  "--wait", "--timeout", "10m", "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    done = json.loads(out.stdout)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    rows = done["progress"]["rowsTotal"]
    assert rows > 0 and done["progress"]["rowsDone"] == rows
    assert done["report"]["meanScore"] is not None
    # Its rows are read back from the store (the job's output folder is on its node).
    assert not (svc.daemon.data_dir / "evaluations" / done["evaluationId"] / "output" / "rows.jsonl").exists()
    listed = svc.cli.json("evaluations", "rows", done["evaluationId"], "--limit", 100)
    assert listed["total"] == rows and len(listed["rows"]) == min(rows, 100)
    assert all("output" in r for r in listed["rows"]), listed["rows"][:2]
    # Its events reached trainerd over the API, from a job that saw an empty data folder.
    job_id = f"{done['evaluationId']}-1"
    kinds = [json.loads(doc)["type"] for _, doc in stored(svc, "job_events", job_id)]
    assert "evaluation_report" in kinds, kinds
    assert stored(svc, "job_logs", job_id), "the evaluation's log lines reach trainerd over its API"
    # Ray's own log of the job (the wrapper's lines before trainer-job started) is fetched from
    # Ray's API when the job ended, into the evaluation's job.log as for a run's attempt.
    ray_log = svc.daemon.data_dir / "evaluations" / done["evaluationId"] / "job.log"
    assert f"node: {svc.daemon.data_dir} holds 0 entries" in ray_log.read_text(errors="replace")


MAX_TOKENS = 8
PROMPT = [{"role": "user", "content": "Is this review positive? The soup was cold."}]


def greedy(origin: str, path: str, model: str, token: str | None = None) -> dict:
    """One greedy chat completion at `origin` + `path` (sending `token`, else the one kept for
    `origin`): its text and generated token ids."""
    token = token or auth.token_for(origin)
    status, _, body = auth.call_as(origin, "POST", path, token, {
        "model": model, "messages": PROMPT, "temperature": 0, "max_tokens": MAX_TOKENS, "ignore_eos": True,
        "return_token_ids": True}, timeout=300)
    assert status == 200, (status, body)
    choice = body["choices"][0]
    return {"text": choice["message"]["content"], "ids": choice["token_ids"]}


class LocalServe:
    """`trainer-job serve` on this host reading the model and adapter folders directly: the reference."""

    def __init__(self, bin_dir: pathlib.Path, model: pathlib.Path, adapters: dict[str, pathlib.Path], name: str):
        args = [str(bin_dir / "trainer-job"), "serve", "--model", str(model), "--name", name, "--port", "0"]
        for n, d in adapters.items():
            args += ["--adapter", f"{n}={d}"]
        self.proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        line = json.loads(self.proc.stdout.readline())
        assert line["event"] == "listening", line
        self.origin = f"http://127.0.0.1:{line['port']}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=60)


def test_an_endpoint_serves_a_base_model_and_an_attached_adapter_staged_in_the_store(unshared, bin_dir, tiny_model,
                                                                                    s3_server):
    """Endpoints on nodes that share no folder with trainerd (issue 24): trainerd stages the base
    model in the store (reusing the key a run staged), the serving process (in a job that sees an
    empty data folder) fetches it into its node's cache, and says where it listens through its
    log posted to trainerd. A tuned adapter attached at run time is staged under its content hash
    and fetched by the process before it loads. Greedy answers through trainerd equal the same
    model and adapter served on this host from their folders; detach drops the adapter."""
    svc = unshared
    run_id = svc.start(max_steps=3)["runId"]
    run = svc.wait_phase(run_id, "COMPLETED", timeout=600)
    model_sha = run["baseModelHash"]

    e = svc.cli.json("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--wait", "--timeout", "10m")
    assert e["phase"] == "READY", e
    eid = e["endpointId"]
    folder = svc.daemon.data_dir / "endpoints" / eid
    # Its spec names the staged model, nothing of trainerd's data folder; the base model is the
    # object the run staged (inputs/models/SHA), committed.
    spec = json.loads((folder / "spec.json").read_text())
    assert spec["model"] == f"{ROOT}/inputs/models/{model_sha}", spec
    assert str(svc.daemon.data_dir) not in json.dumps(spec), spec
    objects = bucket_objects(s3_server, BUCKET, "cluster/inputs/models/")
    assert f"cluster/inputs/models/{model_sha}/.trainer-folder" in objects, sorted(objects)
    assert staged_lines(svc).count(f"inputs/models/{model_sha}") == 1, staged_lines(svc)  # staged once, reused
    # Where it listens came over the API: its log (stdout, on the node) is not in trainerd's folder.
    assert not (folder / "serve.log").exists()
    job_id = f"{eid}-1"
    log = [text for _, text in stored(svc, "job_logs", job_id)]
    assert any('"event":"listening"' in line for line in log), log
    assert any(f"--model {spec['model']}: " in line and ("fetched" in line or "reusing the verified copy" in line)
               for line in log), log
    assert [json.loads(doc)["type"] for _, doc in stored(svc, "job_events", job_id)][0] == "hello"

    # The base model answers through trainerd as it does from its folder on this host.
    route = f"/v1/endpoints/{eid}/v1/chat/completions"
    base = greedy(svc.daemon.url, route, MODEL_NAME)
    assert len(base["ids"]) == MAX_TOKENS, base

    # The tuned adapter attaches to the same process: staged under its content hash, fetched on the node.
    before = len(staged_lines(svc))
    out = svc.cli.json("endpoints", "create", "--model", run_id)
    assert out["endpointId"] == eid and out["attachedModel"] == run_id, out
    adapter_keys = staged_lines(svc)[before:]
    assert len(adapter_keys) == 1 and adapter_keys[0].startswith("inputs/models/"), staged_lines(svc)
    assert f"cluster/{adapter_keys[0]}/adapter_model.safetensors" in bucket_objects(s3_server, BUCKET, "cluster/inputs/models/")
    secret = auth.serving_secret(svc.daemon.data_dir, eid)["Authorization"].removeprefix("Bearer ")
    origin = svc.cli.json("endpoints", "get", eid)["address"].removesuffix("/v1")
    status, _, listed = auth.call_as(origin, "GET", "/v1/adapters", secret)
    assert status == 200 and [a["name"] for a in listed["data"]] == [run_id], listed
    cache = svc.tmp / "node-cache" / "models" / adapter_keys[0].removeprefix("inputs/models/")
    assert pathlib.Path(listed["data"][0]["path"]) == cache, listed
    tuned = greedy(svc.daemon.url, route, run_id)

    # The reference: the same model and adapter folders served on this host.
    local = LocalServe(bin_dir, tiny_model, {run_id: folder / "adapters" / run_id}, MODEL_NAME)
    try:
        assert greedy(local.origin, "/v1/chat/completions", MODEL_NAME) == base
        assert greedy(local.origin, "/v1/chat/completions", run_id) == tuned
    finally:
        local.close()

    # Detach drops the adapter from the process; the base model serves on.
    svc.cli("endpoints", "detach", eid, run_id, check=True)
    status, _, listed = auth.call_as(origin, "GET", "/v1/adapters", secret)
    assert status == 200 and listed["data"] == [], listed
    status, _, body = auth.call_as(svc.daemon.url, "POST", route, auth.token_for(svc.daemon.url),
                                   {"model": run_id, "messages": PROMPT})
    assert status == 404 and body["error"]["code"] == "model_not_found", (status, body)
    assert greedy(svc.daemon.url, route, MODEL_NAME) == base

    svc.cli("endpoints", "delete", eid, check=True)
    wait_for(lambda: svc.cli.json("endpoints", "get", eid)["phase"] == "DELETED", 120, "the endpoint to go")
    assert not [c for c in svc.cli.json("capacity")["claims"] if c["kind"] == "SERVING"]


def test_without_an_s3_store_an_endpoint_is_refused_by_name_where_the_nodes_share_no_folder(
        bin_dir, tiny_model, tmp_path, ray_head):
    """Nodes that share no folder with trainerd and no S3 store to stage the model in: a serving
    process could find nothing, so creating an endpoint is refused naming jobFolder and
    artifactStore, and nothing is stored or claimed."""
    svc = Service(bin_dir, tmp_path, tiny_model, {
        "compute": {"backend": "ray", "ray": {"address": ray_head.address, "jobFolder": str(tmp_path / "node-jobs")}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
    }).ready()
    try:
        out = svc.cli("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD)
        assert out.returncode == 1 and "jobFolder" in out.stderr and "artifactStore" in out.stderr, out.stderr
        assert svc.cli.json("endpoints", "list")["endpoints"] == []
        assert not [c for c in svc.cli.json("capacity")["claims"] if c["kind"] == "SERVING"]
    finally:
        svc.close()
