"""A job's start fenced by the store (docs/durability.md, "Replicas"; docs/job-protocol.md, "Leave to
train"), end to end with two real trainerd replicas on the session's real PostgreSQL and their real
jobs: replica r0 is held (TRAINER_TEST_LAUNCH_HOLD) inside its step, after its last lease check and
before the backend starts the run's job, as a replica SIGSTOPped at that instant would be; r1 takes
the run over once r0's lease runs out and starts the attempt's job itself; then r0 is released and
starts its job too. That late job is refused leave to train and exits 75 without writing an event:
exactly one job trains, the run completes on its first attempt."""
from __future__ import annotations

import pytest

from cli_support import Cli, call, get_run, plan_text, prepare, start_run_id, start_trainerd, stop, wait_for
from pg_server import create_database
from replicas_support import replicas_config

LEASE_SECONDS = 3  # --lease-seconds of both replicas: how soon r1 may take the held r0's run over


@pytest.mark.timeout(600)
def test_a_job_started_by_a_replica_that_lost_the_runs_lease_exits_without_training(bin_dir, tiny_model,
                                                                                     postgres_server, tmp_path):
    url = create_database(postgres_server, "fenced")
    database = url.rsplit("/", 1)[1]
    config = replicas_config(tiny_model, url, 1)
    data_dir = tmp_path / "shared-data"
    starts = tmp_path / "job-starts"  # each job that trains appends "RUN ATTEMPT PID" (TRAINER_TEST_JOB_STARTS)
    hold = tmp_path / "hold-launch"   # r0's first start of a job holds while this file exists
    hold.write_text("")
    args = ("--lease-seconds", str(LEASE_SECONDS))
    replicas = []
    try:
        replicas.append(start_trainerd(bin_dir, tmp_path / "r0", config, data_dir=data_dir,
                                       args=("--instance", "r0", *args),
                                       env={"TRAINER_TEST_LAUNCH_HOLD": str(hold), "TRAINER_TEST_JOB_STARTS": str(starts)}))
        r0 = replicas[0]
        cli0 = prepare(Cli(bin_dir / "trainer", r0.url))
        run_id = start_run_id(cli0, plan_text(max_steps=4))
        held = f"test hook: start of run {run_id} attempt 1 held after its lease check"
        wait_for(lambda: held in r0.log.read_text(), timeout=120, what="r0 held before starting the run's job")

        # r1 takes the run over once r0's lease has run out, and starts the attempt's job.
        replicas.append(start_trainerd(bin_dir, tmp_path / "r1", config, data_dir=data_dir,
                                       args=("--instance", "r1", *args),
                                       env={"TRAINER_TEST_JOB_STARTS": str(starts)}))
        cli1 = Cli(bin_dir / "trainer", replicas[1].url)
        status, info = call(f"{replicas[1].url}/v1/info")
        assert status == 200, info
        r1_name = info["replica"]
        wait_for(lambda: postgres_server.psql(database, "SELECT owner FROM tasks WHERE kind = 'run' AND id = :'id';",
                                              id=run_id) == r1_name,
                 timeout=120, what="r1 holding the run's lease")
        wait_for(lambda: get_run(cli1, run_id)["phase"] not in ("SUBMITTING", "WAITING_FOR_DEVICES"), timeout=120,
                 what="r1's job of attempt 1 recorded")
        fence = int(postgres_server.psql(database, "SELECT fence FROM tasks WHERE kind = 'run' AND id = :'id';", id=run_id))

        # r0 continues: it starts its job all the same, and that job is refused leave to train.
        hold.unlink()
        log = data_dir / "runs" / run_id / "attempt-1" / "job.log"
        refusal = wait_for(lambda: next((line for line in log.read_text().splitlines()
                                         if "trainer-job run: not training:" in line), None),
                           timeout=120, what="r0's late job refused leave to train")
        assert f"lost run {run_id}'s lease" in refusal, refusal
        assert f"started under fence {fence}" in refusal, refusal
        assert "released" in r0.log.read_text().split(held, 1)[1], "r0 went on past its hold"

        waited = cli1("runs", "wait", run_id, "--timeout", "5m", timeout=360)
        assert waited.returncode == 0, (waited.stdout, waited.stderr)
        run = get_run(cli1, run_id)
        assert run["phase"] == "COMPLETED", (run.get("failureReason"), run.get("attempts"))
        assert run["attempt"] == 1 and len(run["attempts"]) == 1, run["attempts"]
        assert run["progress"]["step"] == 4, run["progress"]
        trained = [line.split() for line in starts.read_text().splitlines()]
        assert [(r, a) for r, a, _ in trained] == [(run_id, "1")], f"exactly one job trained: {trained}"
        print(f"\nfenced start: r0 held, r1 took the run over (fence {fence}) and its job trained; "
              f"r0's late job refused: {refusal.strip()}")
    finally:
        for r in replicas:
            stop(r.proc, None)
        if replicas:
            stop(replicas[0].proc, data_dir)
