"""The Slurm backend against a real Slurm (Debian's slurmctld + slurmd, one node, started by the
`slurm` fixture): real training jobs submitted with sbatch through `trainer runs start`, followed
with squeue/scontrol, cancelled with scancel, and found again by a restarted trainerd; an
evaluation's job, submitted the same way; and an endpoint's serving process, as a Slurm job that
its delete ends (one node; trainerd reaches it at the job's batch host, as Slurm names it)."""
from __future__ import annotations

import json
import urllib.request

import pytest

from backend_support import Service, trainer_job_version
from clusters import SlurmCluster
from cli_support import EXAMPLES, MODEL_NAME, WORKLOAD
from waiting import wait_for

LONG = 100000


@pytest.fixture
def service(bin_dir, tiny_model, tmp_path, slurm):
    svc = Service(bin_dir, tmp_path, tiny_model, {
        "compute": {"backend": "slurm", "slurm": {"slurmConf": str(slurm.conf)}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
    }).ready()
    yield svc
    svc.close()


def slurm_job_id(run: dict) -> str:
    job = run["placement"]["job"]
    assert job.startswith("Slurm job "), job
    return job.split()[-1]


def test_a_run_trains_as_a_slurm_batch_job(service, slurm):
    run_id = service.start(max_steps=3)["runId"]
    done = service.wait_phase(run_id, "COMPLETED")
    phases = [p["phase"] for p in done["phaseHistory"]]
    assert phases[-4:] == ["QUEUED", "PREPARING", "TRAINING", "FINALIZING"] or "TRAINING" in phases, phases
    assert phases[-1] == "COMPLETED"
    assert done["placement"]["backend"] == "slurm"
    job = slurm.job(slurm_job_id(done))
    # Named after the run and attempt (how a restarted trainerd finds it), ended well, CPUs asked.
    assert job["JobName"] == f"trainer-{run_id}-1"
    assert job["JobState"] == "COMPLETED" and job["ExitCode"] == "0:0"
    assert job["NumCPUs"] == "1"
    events = service.events(run_id)
    assert [e["step"] for e in events if e["type"] == "step"] == [1, 2, 3]
    assert [m["step"] for m in service.metrics(run_id)] == [1, 2, 3]
    print(f"\nslurm: trainer runs start -> first training step: {service.first_step_seconds(run_id):.1f} s")
    assert done["progress"]["step"] == 3 and done["adapterPath"]


def test_cancel_stops_the_slurm_job(service, slurm):
    run_id = service.start(max_steps=LONG)["runId"]
    running = service.wait_step(run_id)
    job_id = slurm_job_id(running)
    assert slurm.job(job_id)["JobState"] == "RUNNING"
    service.cancel(run_id)
    cancelled = service.wait_phase(run_id, "CANCELLED")
    assert cancelled["outcome"] == "CANCELLED"
    state = slurm.job(job_id)["JobState"]
    assert state in ("COMPLETED", "CANCELLED", "FAILED"), state  # no longer running
    assert any(e.get("outcome") == "CANCELLED" for e in service.events(run_id) if e["type"] == "outcome")


def test_a_job_slurm_cancels_fails_the_run_with_the_reason(service, slurm):
    run_id = service.start(max_steps=LONG, max_attempts=1)["runId"]
    job_id = slurm_job_id(service.wait_step(run_id))
    # The cluster's operator cancels it with SIGKILL (no chance for the job to report).
    out = slurm.run("scancel", "--full", "--signal=KILL", job_id)
    assert out.returncode == 0, out.stderr
    slurm.run("scancel", job_id)
    failed = service.wait_phase(run_id, "FAILED")
    assert f"job {job_id}" in failed["failureReason"], failed["failureReason"]


def test_trainerd_killed_and_restarted_follows_its_slurm_job(service, slurm):
    run_id = service.start(max_steps=40)["runId"]
    job_id = slurm_job_id(service.wait_step(run_id))
    service.restart(kill=True)
    done = service.wait_phase(run_id, "COMPLETED")
    assert slurm_job_id(done) == job_id  # the same job, followed, not a second one
    out = slurm.run("squeue", "-h", "--states=all", f"--name=trainer-{run_id}-1", "-o", "%i")
    assert out.stdout.split() == [job_id]
    assert done["progress"]["step"] == 40


def cluster_section(service, outside: int, held: int = 0) -> dict:
    """The capacity report's cluster section once its OUTSIDE and HELD are the figures given (the
    report reads the cluster again when its last read is over 5 s old)."""
    def read():
        cluster = service.cli.json("capacity")["cluster"]
        return cluster if (cluster["outside"], cluster["held"]) == (outside, held) else None
    return wait_for(read, 120, f"the cluster section with outside {outside} and held {held}", interval=1)


def test_capacity_observes_the_slurm_node(service, slurm):
    cap = service.cli.json("capacity")
    pool = cap["pools"][0]
    assert pool["observed"] == 1  # one node up, one CPU device per node
    # The cluster section: what the Slurm backend read (nothing held, nothing running on the node).
    cluster = cluster_section(service, outside=0)
    assert (cluster["backend"], cluster["nodes"], cluster["devices"]) == ("slurm", 1, {"cpu": 1}), cluster
    assert cluster["readAt"] and "sinfo" in cluster["source"], cluster
    text = service.cli("capacity", check=True).stdout
    assert "Cluster (slurm: " in text and "NODES" in text and "READ" in text, text
    info = service.cli.json("info")
    assert "Slurm" in str(info), info
    # The spec's observed-devices series, for the pool.
    with urllib.request.urlopen(service.daemon.url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    observed = [line for line in text.splitlines() if line.startswith("akka_optimize_training_pool_devices_observed")]
    assert observed and observed[0].rstrip().endswith(" 1"), observed


def test_an_evaluation_runs_as_a_slurm_batch_job(service, slurm, tmp_path):
    rows = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()[-16:]
    (tmp_path / "held-out.jsonl").write_text("\n".join(rows) + "\n")
    service.cli("datasets", "create", "-f", tmp_path / "held-out.jsonl", "--name", "held-out", check=True)
    started = service.cli.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD,
                               "--dataset", "held-out", "--max-new-tokens", 8)
    eid = started["evaluationId"]
    done = service.cli.json("evaluations", "wait", eid, "-q", "--timeout", "5m")
    assert done["phase"] == "COMPLETED" and done["report"]["rows"] == 16, done
    assert done["progress"] == {"rowsDone": 16, "rowsTotal": 16}
    assert len(service.cli.json("evaluations", "rows", eid, "--limit", 100)["rows"]) == 16
    # Its job was a Slurm batch job named after the evaluation and its attempt, which ended well.
    out = slurm.run("scontrol", "show", "job", "-o")
    assert out.returncode == 0, out.stderr
    mine = [line for line in out.stdout.splitlines() if f"JobName=trainer-{eid}-1 " in line]
    assert len(mine) == 1 and "JobState=COMPLETED" in mine[0], out.stdout


def test_an_endpoint_serves_from_a_slurm_job_and_delete_ends_it(service, slurm):
    e = service.cli.json("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--wait",
                         "--timeout", "5m")
    assert e["phase"] == "READY", e
    eid = e["endpointId"]

    def slurm_job(key: str) -> str:
        out = slurm.run("scontrol", "show", "job", "-o")
        assert out.returncode == 0, out.stderr
        mine = [line for line in out.stdout.splitlines() if f"JobName=trainer-{eid}-1 " in line]
        assert len(mine) == 1, out.stdout
        return mine[0].split(f" {key}=")[1].split()[0]

    def slurm_state() -> str:
        return slurm_job("JobState")

    assert slurm_state() == "RUNNING"
    # trainerd reaches the process on its job's batch host (the node's name Slurm gives).
    address = service.cli.json("endpoints", "get", eid)["address"]
    assert address.startswith(f"http://{slurm_job('BatchHost')}:"), address
    sent = service.cli.json("endpoints", "send", eid, "--input", "Hello", "--temperature", 0, "--max-tokens", 4)
    assert sent["model"] == MODEL_NAME and 0 < sent["usage"]["completion_tokens"] <= 4, sent
    service.cli("endpoints", "delete", eid, check=True)
    wait_for(lambda: service.cli.json("endpoints", "get", eid)["phase"] == "DELETED", 120, "the endpoint to go")
    wait_for(lambda: slurm_state() != "RUNNING", 60, "its Slurm job to end")
    assert eid not in {c["owner"] for c in service.cli.json("capacity")["claims"]}


def test_capacity_scan_runs_one_job_on_each_slurm_node(service, slurm, bin_dir):
    """`trainer capacity scan` on Slurm: one srun per node sinfo lists up, its answer under the
    node's Slurm name, with the trainer-job version and the free space of the shared data folder."""
    out = service.cli("capacity", "scan", "-o", "json")
    assert out.returncode == 0, out.stderr
    scan = json.loads(out.stdout)
    assert scan["backend"] == "slurm"
    [node] = scan["nodes"]  # the cluster's one node, "localhost"
    assert node["node"] == "localhost" and "error" not in node, node
    assert node["version"] == trainer_job_version(bin_dir)
    assert [d["role"] for d in node["disks"]] == ["data", "tmp", "shm"], node
    data = node["disks"][0]
    assert data["path"] == str(service.daemon.data_dir) and data["freeBytes"] > 0, data
    text = service.cli("capacity", "scan", check=True).stdout
    assert "Node localhost (trainer-job " in text and "FOLDER" in text, text


def test_a_node_whose_scan_job_fails_is_named_with_its_error_and_the_exit_status_stays_zero(bin_dir, tiny_model,
                                                                                          tmp_path, slurm):
    """The scan's job fails on the node (a trainer-job that exits 3): the node is in the answer with
    srun's exit and the job's message, and `trainer capacity scan` still exits 0."""
    bins = tmp_path / "bin"  # trainerd and the CLI as built, beside a trainer-job that fails
    bins.mkdir()
    for name in ("trainerd", "trainer"):
        (bins / name).symlink_to(bin_dir / name)
    failing = bins / "trainer-job"
    failing.write_text("#!/bin/sh\necho 'this node cannot scan' >&2\nexit 3\n")
    failing.chmod(0o755)
    svc = Service(bins, tmp_path, tiny_model, {
        "compute": {"backend": "slurm", "slurm": {"slurmConf": str(slurm.conf)}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1}],
    })
    try:
        out = svc.cli("capacity", "scan", "-o", "json")
        assert out.returncode == 0, out.stderr
        [node] = json.loads(out.stdout)["nodes"]
        assert node["node"] == "localhost" and "version" not in node, node
        assert node["error"].startswith("srun exited ") and "this node cannot scan" in node["error"], node
        text = svc.cli("capacity", "scan")
        assert text.returncode == 0 and "Node localhost: no answer: srun exited " in text.stdout, text.stdout
    finally:
        svc.close()


def test_capacity_counts_the_node_another_users_job_holds_as_outside(service, slurm):
    """OUTSIDE is what the cluster gives to work that is not this service's: a batch job of someone
    else's on the node makes it one device outside; a run of ours on it is HELD, not outside."""
    cluster_section(service, outside=0)
    run_id = service.start(max_steps=LONG)["runId"]
    service.wait_step(run_id)
    cluster_section(service, outside=0, held=1)  # the node runs our job: held, not outside
    service.cancel(run_id)
    service.wait_phase(run_id, "CANCELLED")
    other = slurm.run("sbatch", "--parsable", "--job-name=someone-else", "--output=/dev/null", "-c", "1", "--wrap", "sleep 600")
    assert other.returncode == 0, other.stderr
    try:
        cluster = cluster_section(service, outside=1)
        assert cluster["devices"] == {"cpu": 1}, cluster
        text = service.cli("capacity", check=True).stdout
        cluster_lines = text[text.index("Cluster (slurm: "):].splitlines()
        header, row = cluster_lines[1], cluster_lines[2]
        assert header.split() == ["NODES", "DEVICES", "HELD", "OUTSIDE", "READ"], cluster_lines
        assert row[header.index("OUTSIDE"):].split()[0] == "1", cluster_lines
    finally:
        slurm.run("scancel", other.stdout.strip())
    cluster_section(service, outside=0)


def test_gpus_another_users_job_holds_are_outside(bin_dir, tiny_model, tmp_path, tmp_path_factory):
    """On a cluster whose node has 2 devices (a count-only gres, named to trainerd as its GPU gres),
    a job of someone else's holding one of them is 1 OUTSIDE of the cluster's 2 devices."""
    cluster = SlurmCluster.start(tmp_path_factory.mktemp("slurm-gres"), gpus=2)
    svc = None
    try:
        svc = Service(bin_dir, tmp_path, tiny_model, {
            "compute": {"backend": "slurm", "slurm": {"slurmConf": str(cluster.conf), "gresName": "accel"}},
            "pools": [{"name": "gpu", "accelerator": "any", "declared": 2, "maxClaim": 1}],
        })
        assert svc.cli.json("capacity")["pools"][0]["observed"] == 2
        first = cluster_section(svc, outside=0)
        assert first["devices"] == {"gpu": 2} and first["deviceCount"] == 2, first
        other = cluster.run("sbatch", "--parsable", "--job-name=someone-else", "--output=/dev/null", "-c", "1", "--gres=accel:1",
                            "--wrap", "sleep 600")
        assert other.returncode == 0, other.stderr
        cluster_section(svc, outside=1)
        cluster.run("scancel", other.stdout.strip())
        cluster_section(svc, outside=0)
    finally:
        if svc:
            svc.close()
        cluster.stop()
