"""Faults an operator's worst day brings, through the real `trainer` CLI against a real trainerd
running real jobs (issue 33, "found in the same fault tour"):

- a job inherits none of trainerd's descriptors, so trainerd SIGKILLed while the job runs binds
  its port again at once;
- an upload over the service's body limit ends with the service's 413 and what to do, never by
  SIGPIPE;
- `runs branch`, `continue` and `sweep` print the submission id they generated and how to repeat
  them safely;
- reservations never committed and publish temporaries left by jobs that died are removed after
  limits.abandonedPublicationSeconds;
- a snapshot deleted or damaged behind the catalog's back is refused by `runs resume`, `branch`
  and `continue` before a device is claimed, naming the snapshot, and is no longer Available.
"""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import sqlite3
import subprocess
import threading
import time

import pytest

from cli_support import (EXAMPLES, MODEL_NAME, Cli, call, cancel_run, count_runs, ended, get_run, job_credentials,
                         job_pids, plan_text, prepare, snapshot_at, start_run_id, start_trainerd, stop, wait_for,
                         wait_paused, wait_phase, weights_reservation)

pytestmark = pytest.mark.timeout(1200)

PAYLOAD = b"adapter bytes"


def plan(max_steps: int, save_every: int | None = None) -> str:
    keep = 100 if save_every else None
    return plan_text(max_steps, save_every=save_every, keep_adapters=keep, keep_training_states=keep)


def job_pid(run_id: str) -> int:
    """The pid of the run's trainer-job, once it runs."""
    return wait_for(lambda: job_pids(run_id), timeout=120, what=f"run {run_id}'s job to start")[0]


def descriptors(pid: int) -> dict[int, str]:
    """Every open descriptor of `pid` and what it points at ("socket:[INODE]", a path, ...)."""
    out = {}
    for entry in pathlib.Path(f"/proc/{pid}/fd").iterdir():
        try:
            out[int(entry.name)] = os.readlink(entry)
        except OSError:
            pass  # closed meanwhile
    return out


def listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP `port` (IPv4 and IPv6), from /proc/net/tcp*."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = pathlib.Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                inodes.add(inode)
    return inodes


@pytest.fixture(scope="module")
def service(bin_dir, tiny_model, tmp_path_factory):
    """A trainerd whose leftovers deadline is short (and the publication deadline below it)."""
    tmp = tmp_path_factory.mktemp("faults")
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "limits": {"publishDeadlineSeconds": 2, "abandonedPublicationSeconds": 4}}
    svc = start_trainerd(bin_dir, tmp, config)
    svc.config, svc.tmp = config, tmp
    cli = Cli(bin_dir / "trainer", svc.url)
    svc.cli = prepare(cli)
    yield svc
    stop(svc.proc, svc.data_dir)


# ---- 1. no descriptor of trainerd reaches a job -------------------------------------------------

def test_trainerd_killed_while_a_job_runs_binds_its_port_again_at_once(bin_dir, service):
    cli = service.cli
    port = int(service.url.rsplit(":", 1)[1])
    run_id = start_run_id(cli, plan(100000))
    try:
        pid = job_pid(run_id)
        wait_phase(cli, run_id, "TRAINING")
        listener = listening_inodes(port)
        assert listener, f"nothing listens on {port}"
        theirs = descriptors(service.proc.pid)
        ours = descriptors(pid)
        # The job holds no socket trainerd holds (its listener above all), and none of its files.
        shared = {t for t in ours.values() if t.startswith("socket:")} & set(theirs.values())
        assert not shared, (shared, ours)
        assert not {f"socket:[{i}]" for i in listener} & set(ours.values()), (listener, ours)
        assert not any(t.endswith("state.db") for t in ours.values()), ours
        # Only the standard streams are inherited: whatever else it holds, it opened itself
        # after exec, so none of it is in trainerd's table either.
        assert not {t for fd, t in ours.items() if fd > 2} & {t for t in theirs.values() if t.startswith("socket:")}

        os.kill(service.proc.pid, signal.SIGKILL)
        service.proc.wait(timeout=30)
        assert os.path.exists(f"/proc/{pid}"), "the job outlives trainerd"
        # Started again on the same port at once: no "Address already in use".
        restarted = start_trainerd(bin_dir, service.tmp, service.config, port=port)
        service.proc, service.log = restarted.proc, restarted.log
        assert restarted.url == service.url
        assert "Address already in use" not in restarted.log_text()
        assert get_run(cli, run_id)["phase"] == "TRAINING"  # the new trainerd found the job running
    finally:
        cancel_run(cli, run_id)


# ---- 2. uploads over the body limit ---------------------------------------------------------------

def big_dataset(path: pathlib.Path, size: int) -> pathlib.Path:
    row = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()[0] + "\n"
    with open(path, "w") as f:
        f.write(row * (size // len(row) + 1))
    return path


def test_an_upload_over_the_body_limit_gets_the_limit_and_what_to_do(service, tmp_path):
    cli = service.cli
    limit = get_limit(cli)
    assert limit == 64 << 20
    dataset = big_dataset(tmp_path / "big.jsonl", 70 << 20)
    out = cli("datasets", "create", "-f", dataset, "--name", "too-big", timeout=300)
    assert out.returncode not in (0, 141, -signal.SIGPIPE), (out.returncode, out.stderr)
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert f"over the limit of {limit} bytes" in out.stderr, out.stderr
    assert "limits.maxDatasetBytes" in out.stderr and "split" in out.stderr, out.stderr
    assert cli("datasets", "get", "too-big").returncode != 0  # nothing registered

    bundle = tmp_path / "bundle" / "scoring"
    bundle.mkdir(parents=True)
    (bundle / "__init__.py").write_text("")
    for k in range(10):  # 10 files of 7 MiB: each under a bundle file's 8 MiB, together over the body limit
        (bundle / f"table{k}.py").write_text("TABLE = '" + "x" * (7 << 20) + "'\n")
    out = cli("bundles", "register", tmp_path / "bundle", "--name", "too-big", timeout=300)
    assert out.returncode == 1, (out.returncode, out.stderr)
    assert f"over the limit of {limit} bytes" in out.stderr, out.stderr
    assert "limits.maxDatasetBytes" in out.stderr, out.stderr

    # A body under the limit, but large enough to be announced before it is sent, still goes in.
    fits = big_dataset(tmp_path / "fits.jsonl", 300 << 10)
    out = cli("datasets", "create", "-f", fits, "--name", "fits")
    assert out.returncode == 0, out.stderr
    assert "Registered dataset fits" in out.stdout


def get_limit(cli) -> int:
    return cli.json("info")["configuration"]["limits"]["maxDatasetBytes"]


# ---- 3. generated submission ids are printed --------------------------------------------------------

@pytest.fixture(scope="module")
def parent(service):
    """A completed run with snapshots at steps 2 and 4."""
    run_id = start_run_id(service.cli, plan(4, save_every=2))
    run = ended(service.cli, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    return run_id


TOKEN = re.compile(r"--submission-id ([0-9a-f]{16})")


def test_branch_continue_and_sweep_print_the_submission_id_they_generated(service, parent, tmp_path):
    cli = service.cli
    snap = snapshot_at(cli, parent, 4)["snapshotId"]
    out = cli("runs", "branch", parent, "--snapshot", snap, "--steps", "1", check=True)
    token = TOKEN.search(out.stdout)
    assert token and f"(submission {token[1]})" in out.stdout, out.stdout
    child = re.search(r"Started run ([0-9a-f-]+)", out.stdout)[1]
    # Repeating it with the printed token reaches the same child.
    again = cli("runs", "branch", parent, "--snapshot", snap, "--steps", "1", "--submission-id", token[1], check=True)
    assert re.search(r"Started run ([0-9a-f-]+)", again.stdout)[1] == child, again.stdout
    assert "add --submission-id" not in again.stdout  # the user chose the token
    assert len(cli.json("runs", "branches", parent, "--limit", "100")["branches"]) == 1
    first_token = token[1]

    out = cli("runs", "continue", parent, "--steps", "1", check=True)
    assert TOKEN.search(out.stdout) and "(submission " in out.stdout, out.stdout

    grid = tmp_path / "grid.yaml"
    grid.write_text("axes:\n  - path: hyperparams.optimizer.learningRate\n    values: [0.001, 0.002]\n")
    out = cli("runs", "sweep", parent, "--snapshot", snap, "--steps", "1", "--grid", grid, check=True)
    token = TOKEN.search(out.stdout)
    assert token and f"(submission {token[1]})" in out.stdout, out.stdout
    before = len(cli.json("runs", "branches", parent, "--limit", "100")["branches"])
    again = cli("runs", "sweep", parent, "--snapshot", snap, "--steps", "1", "--grid", grid,
                "--submission-id", token[1], check=True)
    assert "2 of the 2 were started before" in again.stdout, again.stdout
    assert len(cli.json("runs", "branches", parent, "--limit", "100")["branches"]) == before
    # What one submission made, whatever its answer's fate: the sweep's two children, by phase.
    made = cli.json("runs", "branches", parent, "--submission", token[1])
    assert made["submissionId"] == token[1] and made["total"] == 2, made
    sids = {b.get("submissionId", "") for b in made["branches"]}
    assert len(sids) == 2 and all(sid.startswith(token[1] + "-") for sid in sids), made
    assert sum(made["phases"].values()) == 2, made
    text = cli("runs", "branches", parent, "--submission", token[1], check=True).stdout
    assert re.search(rf"Submission {token[1]}: 2 children \(\d+ [A-Z_]+", text), text
    made = cli.json("runs", "branches", parent, "--submission", first_token)
    assert [b["runId"] for b in made["branches"]] == [child], made
    unknown = cli("runs", "branches", parent, "--submission", "0123456789abcdef")
    assert unknown.returncode == 1 and "has no child submitted with '0123456789abcdef'" in unknown.stderr, unknown.stderr

    # No answer at all (nothing listens there): the error says how to repeat it safely.
    nowhere = Cli(cli.binary, "http://127.0.0.1:1")
    for args in (["runs", "branch", parent, "--snapshot", snap, "--steps", "1"],
                 ["runs", "continue", parent, "--steps", "1"],
                 ["runs", "sweep", parent, "--snapshot", snap, "--steps", "1", "--grid", grid]):
        out = nowhere(*args)
        assert out.returncode != 0
        assert TOKEN.search(out.stderr) and "repeat the command with --submission-id" in out.stderr, out.stderr
    for run in cli.json("runs", "branches", parent, "--limit", "100")["branches"]:
        ended(cli, run["runId"])


# ---- 4. leftovers of publications that died ----------------------------------------------------------

def snapshot_row(data_dir: pathlib.Path, sid: str) -> dict | None:
    db = sqlite3.connect(str(data_dir / "state.db"))
    try:
        row = db.execute("SELECT doc FROM snapshots WHERE id = ?", (sid,)).fetchone()
    finally:
        db.close()
    return json.loads(row[0]) if row else None


def test_reservations_never_committed_and_publish_temporaries_are_swept(service):
    cli, data = service.cli, service.data_dir
    run_id = start_run_id(cli, plan(100000))
    stop_touching = threading.Event()
    try:
        job = job_credentials(service, run_id)
        sid, body, text = weights_reservation(run_id, 3, PAYLOAD)
        status, reserved = call(f"{service.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
        assert status == 201 and reserved["status"] == "Reserved", reserved
        # The job uploaded part of it and died: the payload, no manifest.
        upload = data / "snapshots" / sid / "weights"
        upload.mkdir(parents=True)
        (upload / "a.bin").write_bytes(PAYLOAD)
        # A publish killed mid-copy left its temporary (folder storage's KEY.tmp.PID.N), long ago;
        # another publish is still filling its own.
        old = data / "snapshots" / ("e" * 64 + ".tmp.4242.0")
        (old / "weights").mkdir(parents=True)
        (old / "weights" / "a.bin").write_bytes(PAYLOAD)
        long_ago = time.time() - 3600
        for p in (old / "weights" / "a.bin", old / "weights", old):
            os.utime(p, (long_ago, long_ago))
        live = data / "snapshots" / ("f" * 64 + ".tmp.4243.0")
        live.mkdir(parents=True)

        def keep_writing():
            n = 0
            while not stop_touching.wait(0.2):
                (live / f"part-{n % 3}").write_bytes(b"x" * 100)
                n += 1
        writer = threading.Thread(target=keep_writing)
        writer.start()

        wait_for(lambda: (snapshot_row(data, sid) or {}).get("state") == "abandoned", timeout=120,
                 what="the reservation to be abandoned")
        doc = snapshot_row(data, sid)
        assert doc["kinds"]["weights"]["state"] == "abandoned" and doc["kinds"]["weights"]["abandonedAt"], doc
        wait_for(lambda: not (data / "snapshots" / sid).exists() and not old.exists(), timeout=120,
                 what="the abandoned upload and the old temporary to be removed")
        assert live.exists(), "a temporary still being written is never removed"
        assert cli("snapshots", "get", sid).returncode == 1  # never listed, before or after
        assert "removed the leftovers of publications that died" in service.log_text()

        stop_touching.set()
        writer.join()
        wait_for(lambda: not live.exists(), timeout=120, what="the temporary to be removed once nobody writes it")

        # The same snapshot reserved again is a reservation again, and commits.
        status, again = call(f"{service.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
        assert status in (200, 201) and again["status"] == "Reserved", again
        upload.mkdir(parents=True)
        (upload / "a.bin").write_bytes(PAYLOAD)
        (upload / "manifest.json").write_bytes(text)
        status, committed = call(f"{service.url}/v1/snapshots/{sid}/commit", "POST", {"kind": "weights"}, job)
        assert status == 200 and committed["artifacts"] == ["weights"], committed
        assert cli.json("snapshots", "get", sid)["status"] == "Available"
    finally:
        stop_touching.set()
        cancel_run(cli, run_id)


def test_the_leftovers_deadline_may_not_undercut_the_publication_deadline(bin_dir, tiny_model, tmp_path):
    config = tmp_path / "trainerd.json"
    config.write_text(json.dumps({"limits": {"publishDeadlineSeconds": 60, "abandonedPublicationSeconds": 30}}))
    proc = subprocess.run(
        [str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0", "--config", str(config),
         "--job-binary", str(bin_dir / "trainer-job")],
        capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "limits.abandonedPublicationSeconds: must be at least limits.publishDeadlineSeconds (60)" in proc.stderr, \
        proc.stderr


# ---- 5. a deleted or damaged snapshot is refused before anything starts -----------------------------

def test_a_deleted_or_damaged_snapshot_is_refused_before_a_device_is_claimed(service, parent):
    cli, data = service.cli, service.data_dir
    runs_before = count_runs(cli)

    # Deleted: step 2's snapshot folder is gone from the artifact store.
    gone = snapshot_at(cli, parent, 2)
    shutil.rmtree(data / "snapshots" / gone["snapshotId"])
    out = cli("runs", "branch", parent, "--snapshot", gone["snapshotId"], "--steps", "1")
    assert out.returncode == 1, out.stdout
    assert gone["snapshotId"] in out.stderr and "weights artifact is missing" in out.stderr, out.stderr
    assert "trainer runs snapshots" in out.stderr, out.stderr
    # The catalog noticed: it is no longer Available, nor listed, and says why.
    got = cli.json("snapshots", "get", gone["snapshotId"])
    assert got["status"] == "Unavailable" and got["artifacts"] == [], got
    for kind in ("weights", "trainingState"):
        assert got["kinds"][kind]["state"] == "missing" and "is gone" in got["kinds"][kind]["unavailableReason"], got
    assert "Unavailable" in cli("snapshots", "get", gone["snapshotId"], check=True).stdout
    assert gone["snapshotId"] not in [s["snapshotId"] for s in
                                      cli.json("runs", "snapshots", parent, "--limit", "100")["snapshots"]]

    # Damaged: step 4's training-state manifest no longer the one committed.
    damaged = snapshot_at(cli, parent, 4)
    manifest = data / damaged["kinds"]["trainingState"]["location"] / "manifest.json"
    manifest.write_bytes(manifest.read_bytes() + b" ")
    out = cli("runs", "continue", parent, "--snapshot", damaged["snapshotId"], "--steps", "1")
    assert out.returncode == 1, out.stdout
    assert damaged["snapshotId"] in out.stderr and "damaged" in out.stderr, out.stderr
    assert count_runs(cli) == runs_before  # nothing was started


def test_a_paused_run_whose_snapshot_was_deleted_is_not_resumed(service):
    cli, data = service.cli, service.data_dir
    run_id = start_run_id(cli, plan(100000))
    try:
        wait_phase(cli, run_id, "TRAINING")
        cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
        run = wait_paused(cli, run_id)
        sid = run["pause"]["snapshotId"]
        snap = cli.json("snapshots", "get", sid)
        shutil.rmtree(data / snap["kinds"]["trainingState"]["location"])
        out = cli("runs", "resume", run_id)
        assert out.returncode == 1, out.stdout
        assert run_id in out.stderr and sid in out.stderr and "missing" in out.stderr, out.stderr
        after = get_run(cli, run_id)
        assert after["phase"] == "PAUSED" and after["attempt"] == run["attempt"], after  # no new attempt, no claim
    finally:
        cancel_run(cli, run_id)
