"""trainerd with its state in PostgreSQL (docs/api.md, "store"; docs/durability.md, "The store on
PostgreSQL"), end to end through the real `trainer` CLI, a real trainerd and its real jobs, on a
real PostgreSQL server (the session's `postgres_server`): a run completes, its state is in the
database and not in the data folder, and a restarted trainerd on the same database keeps it and
goes on; a trainerd SIGKILLed while its run trains, started again on the same database, is a new
replica: it takes the run over once the killed one's lease ran out (under a new fence), finds the
run's job and the run completes on its first attempt.
Bad store settings stop trainerd at its start, naming the field."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from cli_support import (MODEL_NAME, Cli, call, ended, free_port, get_run, plan_text, prepare, start_run, start_run_id,
                         start_trainerd, stop, wait_step)
from pg_server import create_database


def test_a_run_on_postgres_completes_and_a_restarted_trainerd_keeps_it(bin_dir, tiny_model, postgres_server,
                                                                       tmp_path):
    url = create_database(postgres_server, "trainerd_e2e")
    database = url.rsplit("/", 1)[1]
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "store": {"kind": "postgres", "url": url}}
    service = start_trainerd(bin_dir, tmp_path, config)
    try:
        status, info = call(f"{service.url}/v1/info")
        assert status == 200, info
        opened = next(s for s in info["startup"]["steps"] if s["name"] == "open store")
        assert opened["ok"] and opened["message"].startswith(f"PostgreSQL at 127.0.0.1:"), opened
        assert re.search(rf"/{database}, schema version \d+$", opened["message"]), opened
        assert info["configuration"]["store"] == {"kind": "postgres", "url": url, "poolSize": 8}

        cli = prepare(Cli(bin_dir / "trainer", service.url))
        run = start_run(cli, plan_text(max_steps=2), "--wait")
        assert run["phase"] == "COMPLETED", run
        assert not (service.data_dir / "state.db").exists(), "the state is in PostgreSQL, not in the data folder"
        assert postgres_server.psql(database, "SELECT phase FROM runs WHERE id = :'id';", id=run["runId"]) == "COMPLETED"
        assert postgres_server.psql(database, "SELECT phase FROM tasks WHERE kind = 'run' AND id = :'id';",
                                    id=run["runId"]) == "COMPLETED"
    finally:
        stop(service.proc, service.data_dir)

    again = start_trainerd(bin_dir, tmp_path, config)
    try:
        cli = Cli(bin_dir / "trainer", again.url)
        kept = get_run(cli, run["runId"])
        assert kept["phase"] == "COMPLETED", kept
        assert kept["progress"]["step"] == 2, kept["progress"]
        assert kept.get("modelId") == run.get("modelId")
        listed = cli.json("runs", "list")
        assert [r["runId"] for r in listed["runs"]] == [run["runId"]]
        # The restarted trainerd goes on: its dataset, workload and model are there, and a new run completes.
        second = start_run(cli, plan_text(max_steps=1), "--wait")
        assert second["phase"] == "COMPLETED", second
        assert postgres_server.psql(database, "SELECT COUNT(*) FROM runs;") == "2"
    finally:
        stop(again.proc, again.data_dir)


def test_a_trainerd_killed_while_its_run_trains_on_postgres_finds_the_job_again(bin_dir, tiny_model, postgres_server,
                                                                                tmp_path):
    url = create_database(postgres_server, "trainerd_kill")
    database = url.rsplit("/", 1)[1]
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "store": {"kind": "postgres", "url": url}}
    port = free_port()  # the job calls back the address it was given: the same port after the restart
    lease = ("--lease-seconds", "5")  # how long the restarted replica waits for the killed one's lease
    service = start_trainerd(bin_dir, tmp_path, config, port=port, args=lease)
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        steps = 12
        run_id = start_run_id(cli, plan_text(max_steps=steps))
        wait_step(cli, run_id, 2)
        fence, owner = postgres_server.psql(
            database, "SELECT fence, owner FROM tasks WHERE kind = 'run' AND id = :'id';", id=run_id).split("|")
        os.kill(service.proc.pid, signal.SIGKILL)
        service.proc.wait(timeout=30)
        deadline = time.time() + 30
        while True:  # the port is free again once the killed process's socket is gone
            try:
                service = start_trainerd(bin_dir, tmp_path, config, port=port, args=lease)
                break
            except pytest.fail.Exception:
                if time.time() > deadline:
                    raise
                time.sleep(1.0)
        run = ended(cli, run_id)
        assert run["phase"] == "COMPLETED", run
        assert run["attempt"] == 1, run["attempts"]
        assert run["progress"]["step"] == steps, run["progress"]
        fence_after, owner_after = postgres_server.psql(
            database, "SELECT fence, owner FROM tasks WHERE kind = 'run' AND id = :'id';", id=run_id).split("|")
        assert owner_after in ("", call(f"{service.url}/v1/info")[1]["replica"]), owner_after
        assert owner_after != owner, "the restarted trainerd is a new replica, with a name of its own"
        assert int(fence_after) == int(fence) + 1, "it took the run over under a new fence"
        assert postgres_server.psql(database, "SELECT COUNT(*) FROM claims;") == "0", "no claim is left"
    finally:
        stop(service.proc, service.data_dir)


def test_bad_store_settings_stop_trainerd_at_start_naming_the_field(bin_dir, tmp_path):
    cases = [
        ({"kind": "postgres"}, "store.url: required for kind postgres"),
        ({"kind": "mysql", "url": "mysql://db/x"}, "store.kind: 'mysql' is not a store of this build"),
        ({"kind": "postgres", "url": "postgresql://pg:hidden@127.0.0.1:1/nothing"},
         "store.url: cannot connect to PostgreSQL at 127.0.0.1:1/nothing"),
        ({"kind": "postgres", "url": "postgresql://pg:hidden@127.0.0.1:1/nothing", "poolSize": 0},
         "store.poolSize: must be an integer between 1 and 64 (connections), got 0"),
        ({"kind": "sqlite", "poolSize": 4}, "store.poolSize: only for kind postgres"),
    ]
    for i, (store, message) in enumerate(cases):
        config = tmp_path / f"trainerd-{i}.json"
        config.write_text(json.dumps({"store": store}))
        out = subprocess.run([str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / f"data-{i}"), "--port", "0",
                              "--config", str(config)], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0, (store, out.stderr)
        assert message in out.stderr, (store, out.stderr)
        assert "hidden" not in out.stderr, "the password is never repeated"
