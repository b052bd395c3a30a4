"""The Ray backend against a real single-node Ray head (started by the `ray_head` fixture from
.venv-ray): real training jobs submitted through the Jobs REST API by `trainer runs start`, with
the submission id derived from run and attempt, stopped by cancel, and followed across a killed
and restarted trainerd."""
from __future__ import annotations

import json
import os
import urllib.request
import pytest

from backend_support import Service, trainer_job_version
from waiting import wait_for

LONG = 100000


@pytest.fixture
def service(bin_dir, tiny_model, tmp_path, ray_head):
    svc = Service(bin_dir, tmp_path, tiny_model, {
        "compute": {"backend": "ray", "ray": {"address": ray_head.address}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
    }).ready()
    yield svc
    svc.close()


def submission_id(run: dict) -> str:
    job = run["placement"]["job"]
    assert job.startswith("Ray job "), job
    return job.split()[-1]


def test_a_run_trains_as_a_ray_job(service, ray_head):
    run_id = service.start(max_steps=3)["runId"]
    done = service.wait_phase(run_id, "COMPLETED")
    assert done["placement"]["backend"] == "ray"
    sid = submission_id(done)
    assert sid == f"trainer-{run_id}-1"
    job = ray_head.job(sid)
    assert job["status"] == "SUCCEEDED"
    assert job["metadata"] == {"trainerRunId": run_id, "trainerAttempt": "1"}
    assert [e["step"] for e in service.events(run_id) if e["type"] == "step"] == [1, 2, 3]
    assert [m["step"] for m in service.metrics(run_id)] == [1, 2, 3]
    print(f"\nray: trainer runs start -> first training step: {service.first_step_seconds(run_id):.1f} s")
    phases = [p["phase"] for p in done["phaseHistory"]]
    assert "TRAINING" in phases and phases[-1] == "COMPLETED"


def test_cancel_stops_the_ray_job(service, ray_head):
    run_id = service.start(max_steps=LONG)["runId"]
    sid = submission_id(service.wait_step(run_id))
    assert ray_head.job(sid)["status"] == "RUNNING"
    service.cancel(run_id)
    cancelled = service.wait_phase(run_id, "CANCELLED")
    assert cancelled["outcome"] == "CANCELLED"
    assert ray_head.job(sid)["status"] in ("STOPPED", "SUCCEEDED", "FAILED")


def test_trainerd_killed_and_restarted_follows_its_ray_job(service, ray_head):
    run_id = service.start(max_steps=40)["runId"]
    sid = submission_id(service.wait_step(run_id))
    service.restart(kill=True)
    done = service.wait_phase(run_id, "COMPLETED")
    assert submission_id(done) == sid
    assert done["progress"]["step"] == 40
    assert ray_head.job(sid)["status"] == "SUCCEEDED"


def test_capacity_observes_the_ray_node(service, ray_head):
    cap = service.cli.json("capacity")
    assert cap["pools"][0]["observed"] == 1  # one alive node, one CPU device per node
    # Nothing of ours or anyone's runs on the node: none of it is held or outside.
    cluster = wait_for(lambda: (c := service.cli.json("capacity")["cluster"])["outside"] == 0 and c, 120,
                       "the node idle", interval=1)
    assert (cluster["backend"], cluster["nodes"], cluster["devices"], cluster["held"]) == \
        ("ray", 1, {"cpu": 1}, 0), cluster
    assert cluster["readAt"], cluster
    # A Ray job of someone else's holding a CPU of the node: the node is OUTSIDE until it ends.
    other = f"someone-else-{os.getpid()}"
    request = urllib.request.Request(
        ray_head.address + "/api/jobs/", method="POST", headers={"Content-Type": "application/json"},
        data=json.dumps({"entrypoint": "sleep 600", "submission_id": other, "entrypoint_num_cpus": 1}).encode())
    urllib.request.urlopen(request, timeout=60).close()
    try:
        wait_for(lambda: service.cli.json("capacity")["cluster"]["outside"] == 1, 120,
                 "the node counted outside while another job holds it", interval=1)
    finally:
        stop = urllib.request.Request(ray_head.address + f"/api/jobs/{other}/stop", method="POST")
        urllib.request.urlopen(stop, timeout=60).close()
    wait_for(lambda: service.cli.json("capacity")["cluster"]["outside"] == 0, 120, "the node idle again",
             interval=1)
    assert "Cluster (ray: " in service.cli("capacity", check=True).stdout


# A job the cluster lost: test_ray_lost_job.py (a head of its own, stopped and replaced under the job).


def test_capacity_scan_runs_one_job_on_each_ray_node(service, ray_head, bin_dir):
    """`trainer capacity scan` on Ray: one job pinned to each alive node (the head here), its answer
    with the trainer-job version and the free space of the shared data folder; the scan job is a
    Ray job of the cluster that succeeded."""
    out = service.cli("capacity", "scan", "-o", "json")
    assert out.returncode == 0, out.stderr
    scan = json.loads(out.stdout)
    assert scan["backend"] == "ray"
    [node] = scan["nodes"]  # the cluster's one alive node, named as Ray lists it
    with urllib.request.urlopen(ray_head.address + "/nodes?view=summary", timeout=30) as r:
        alive = [n["raylet"]["nodeName"] for n in json.load(r)["data"]["summary"] if n["raylet"]["state"] == "ALIVE"]
    assert [node["node"]] == alive and "error" not in node, (node, alive)
    assert node["version"] == trainer_job_version(bin_dir)
    assert [d["role"] for d in node["disks"]] == ["data", "tmp", "shm"], node
    data = node["disks"][0]
    assert data["path"] == str(service.daemon.data_dir) and data["freeBytes"] > 0, data
    text = service.cli("capacity", "scan", check=True).stdout
    assert f"Node {alive[0]} (trainer-job " in text and "FOLDER" in text, text
