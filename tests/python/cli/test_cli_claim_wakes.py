"""A run waiting for devices is woken by the grant of its claim (docs/architecture.md, "The task
kernel"): WAITING_FOR_DEVICES waits idle, not stepped on every pass, and the admission that grants
its claim makes its task due at once, on SQLite and on PostgreSQL, where the grant is made by one
replica and the waiting run is driven by another.

trainerd's time is a manual clock that stands still (TRAINER_TEST_CLOCK_FILE): a waiting run's
safety recheck (30 s of that clock later) never comes, and neither does the end of any lease, so a
run that leaves WAITING_FOR_DEVICES here was stepped because the grant woke it, by the replica
that holds its lease. One CPU slot; the jobs are the stand-in job (tests/python/service/standin_job.py),
queued for an hour: the holder holds the slot until the test cancels it."""
from __future__ import annotations

import contextlib
import datetime
import json
import os
import pathlib
import signal
import sqlite3

import pytest

from cli_support import (MODEL_NAME, Cli, call, ended, kill_processes, plan_text, prepare, start_trainerd, stop,
                         wait_for, wait_run)
from pg_server import create_database
from replicas_support import replicas_config

T0 = datetime.datetime(2026, 1, 31, 18, 0, 0, tzinfo=datetime.timezone.utc)
LONG = 100000  # steps: the holder never ends by itself
STANDIN_JOB = pathlib.Path(__file__).resolve().parents[1] / "service" / "standin_job.py"
JOB = ("--job-binary", str(STANDIN_JOB))  # after start_trainerd's own --job-binary: the last one holds


@pytest.fixture
def apps() -> pathlib.Path:
    """The built trainerd and trainer (the jobs here are the stand-in, not trainer-job)."""
    repo = pathlib.Path(__file__).resolve().parents[3]
    path = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", repo / "build")) / "apps"
    for name in ("trainerd", "trainer"):
        if not (path / name).exists():
            pytest.fail(f"{path / name} not found: build it first (tools/setup)")
    return path


def standin(config: dict, tmp) -> tuple[dict, dict]:
    """`config` with the stand-in job, queued for an hour; (config, trainerd's environment) with the
    manual clock standing at T0."""
    behaviour = tmp / "standin.json"
    behaviour.write_text(json.dumps({"queueSeconds": 3600}))
    clock = tmp / "clock"
    clock.write_text(str(T0.timestamp()))
    config = {**config, "limits": {"cancelGraceSeconds": 1}}
    return config, {"TRAINER_TEST_CLOCK_FILE": str(clock), "TRAINER_STANDIN_FILE": str(behaviour)}


def stop_all(trainerds, data_dir: pathlib.Path) -> None:
    """Stops the trainerds, then the stand-in jobs they left under `data_dir` (stop() finds
    trainer-job processes only)."""
    for t in trainerds:
        stop(t.proc, data_dir)
    kill_processes(b"standin_job.py", data_dir)


def submit(cli: Cli) -> str:
    return cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan_text(LONG),
               check=True).stdout.strip()


def claim_state(cli: Cli, owner: str) -> str | None:
    return next((c["state"] for c in cli.json("capacity")["claims"] if c["owner"] == owner), None)


def wait_granted(cli: Cli, owner: str) -> None:
    wait_for(lambda: claim_state(cli, owner) == "GRANTED", timeout=300, what=f"{owner}'s claim granted")


def waiting_parked(cli: Cli, run_id: str) -> dict:
    """Waits until the run waits for devices behind the holder; returns its record."""
    run = wait_run(cli, run_id, lambda r: r["phase"] == "WAITING_FOR_DEVICES", "WAITING_FOR_DEVICES")
    assert run["claim"]["state"] == "QUEUED" and run["claim"]["queuePosition"] == 1, run["claim"]
    return run


def past_waiting(run: dict) -> bool:
    return run["phase"] not in ("SIZING_DATASET", "WAITING_FOR_BASE_MODEL", "WAITING_FOR_DEVICES")


def test_a_queued_run_is_granted_and_stepped_when_the_holder_ends(apps, tiny_model, tmp_path):
    config, env = standin({"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                           "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}]}, tmp_path)
    trainerd = start_trainerd(apps, tmp_path, config, args=JOB, env=env)
    try:
        cli = prepare(Cli(apps / "trainer", trainerd.url))
        holder = submit(cli)
        wait_granted(cli, holder)
        waiting = submit(cli)
        waiting_parked(cli, waiting)
        # Parked: its task is due at the recheck (the clock's now + 30 s), not at every pass.
        with contextlib.closing(sqlite3.connect(f"file:{trainerd.data_dir / 'state.db'}?mode=ro", uri=True)) as db:
            due, phase = db.execute("SELECT due_at, phase FROM tasks WHERE kind = 'run' AND id = ?",
                                    (waiting,)).fetchone()
        assert phase == "WAITING_FOR_DEVICES" and due == T0.timestamp() + 30, (phase, due)
        cli("runs", "cancel", holder, "--force", check=True)
        assert ended(cli, holder)["phase"] == "CANCELLED"
        run = wait_run(cli, waiting, past_waiting, "stepped past WAITING_FOR_DEVICES after its grant", timeout=120)
        assert claim_state(cli, waiting) == "GRANTED", run
        phases = [p["phase"] for p in run["phaseHistory"]]
        assert phases.count("WAITING_FOR_DEVICES") == 1 and "SUBMITTING" in phases, phases
        cli("runs", "cancel", waiting, "--force", check=True)
        ended(cli, waiting)
    finally:
        stop_all([trainerd], trainerd.data_dir)


@pytest.mark.timeout(900)
def test_on_postgres_a_grant_made_by_one_replica_wakes_the_run_another_replica_drives(
        apps, tiny_model, postgres_server, tmp_path):
    url = create_database(postgres_server, "wakes")
    database = url.rsplit("/", 1)[1]
    config, env = standin(replicas_config(tiny_model, url, 1), tmp_path)
    data_dir = tmp_path / "shared-data"
    # Short leases only for their session limits: a stopped replica's open transaction (and the
    # admission lock it may hold) ends within a second and a half. The clock stands still, so no
    # lease ever runs out: each task stays with the replica that first stepped it.
    args = ("--lease-seconds", "3", *JOB)

    def task(run_id: str) -> tuple[str, str, float]:
        row = postgres_server.psql(database, "SELECT phase, owner, due_at FROM tasks WHERE kind = 'run' AND id = :'id';",
                                   id=run_id)
        phase, owner, due = row.split("|")
        return phase, owner, float(due)

    a = start_trainerd(apps, tmp_path / "a", config, data_dir=data_dir, args=("--instance", "a", *args), env=env)
    b = None
    try:
        name_a = call(f"{a.url}/v1/info")[1]["replica"]
        cli_a = prepare(Cli(apps / "trainer", a.url))
        holder = submit(cli_a)
        wait_granted(cli_a, holder)
        b = start_trainerd(apps, tmp_path / "b", config, data_dir=data_dir, args=("--instance", "b", *args),
                           env=env)
        name_b = call(f"{b.url}/v1/info")[1]["replica"]
        cli_b = Cli(apps / "trainer", b.url)
        # The waiting run is submitted and first stepped while replica a is stopped: replica b
        # takes its lease (and keeps it: the clock stands still).
        os.kill(a.proc.pid, signal.SIGSTOP)
        try:
            waiting = submit(cli_b)
            wait_for(lambda: task(waiting)[:2] == ("WAITING_FOR_DEVICES", name_b), timeout=120,
                     what="the waiting run parked under replica b's lease")
        finally:
            os.kill(a.proc.pid, signal.SIGCONT)
        waiting_parked(cli_a, waiting)
        phase, owner, due = task(waiting)
        assert due == T0.timestamp() + 30, f"parked until the recheck, not due every pass: {due}"
        assert task(holder)[1] == name_a, "replica a drives the holder"
        # Replica a ends the holder: its release and the grant that follows are a's transaction;
        # the waiting run's next step is replica b's, woken through the database.
        cli_a("runs", "cancel", holder, "--force", check=True)
        assert ended(cli_a, holder)["phase"] == "CANCELLED"
        run = wait_run(cli_a, waiting, past_waiting, "stepped past WAITING_FOR_DEVICES after its grant", timeout=120)
        assert claim_state(cli_a, waiting) == "GRANTED", run
        assert task(waiting)[1] == name_b, "the replica holding its lease stepped it"
        assert task(holder)[1] in (name_a, ""), "the holder stayed with replica a"
        cli_b("runs", "cancel", waiting, "--force", check=True)
        ended(cli_b, waiting)
    finally:
        stop_all([t for t in (b, a) if t is not None], data_dir)
