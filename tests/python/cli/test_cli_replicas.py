"""Several trainerd replicas on one PostgreSQL store (docs/durability.md, "Replicas"), end to end
through the real `trainer` CLI, real trainerds and their real jobs, on the session's real
PostgreSQL server: three replicas sharing one data folder, runs submitted through different
replicas, one replica SIGKILLed while runs train. Every run completes; another replica takes the
killed one's runs over (its leases run out, their fences grow); each attempt's job is started once;
no pool is over-granted at any sampled moment; no claim is left; `trainer runs wait` on one
replica follows runs another one drives (change notices through the database); `trainer info`
names the replica that answered and lists the live ones.

This is the small version (a minute or two on a laptop's two cores: six runs of a few steps, one
kill); tests/python/chaos/test_chaos_replicas.py is the full chaos test (100 runs with pauses,
resumes, branches and cancels, random SIGKILLs and SIGSTOPs for minutes)."""
from __future__ import annotations

import os
import re
import signal
import time
import urllib.request

import pytest

from cli_support import TERMINAL, Cli, call, get_run, plan_text, prepare, start_run_id, start_trainerd, stop, wait_for
from pg_server import create_database
from replicas_support import Sampler, open_runs_of, replicas_config

REPLICAS = 3
RUNS = 6
LEASE_SECONDS = 3  # --lease-seconds of every replica: the bound within which a killed one's runs move
POOL_DEVICES = 2   # the one CPU pool's declared devices: two runs train at once


@pytest.mark.timeout(900)
def test_replicas_on_postgres_share_the_runs_and_take_over_a_killed_ones(bin_dir, tiny_model, postgres_server,
                                                                          tmp_path):
    url = create_database(postgres_server, "replicas")
    database = url.rsplit("/", 1)[1]
    config = replicas_config(tiny_model, url, POOL_DEVICES)
    data_dir = tmp_path / "shared-data"  # one data folder for every replica, as a shared filesystem
    replicas = []
    sampler = None
    try:
        for i in range(REPLICAS):
            replicas.append(start_trainerd(bin_dir, tmp_path / f"r{i}", config, data_dir=data_dir,
                                           args=("--instance", f"r{i}", "--lease-seconds", str(LEASE_SECONDS))))
        names = []
        for i, r in enumerate(replicas):
            status, info = call(f"{r.url}/v1/info")
            assert status == 200, info
            assert info["instance"] == f"r{i}"
            assert re.fullmatch(rf"r{i}-[0-9a-f]{{8}}", info["replica"]), info["replica"]
            names.append(info["replica"])
        assert len(set(names)) == REPLICAS, "every replica signs its leases with a name of its own"

        # info names the replica that answered and lists the live ones, whichever answers.
        def all_live():
            status, info = call(f"{replicas[1].url}/v1/info")
            return status == 200 and sorted(x["name"] for x in info["replicas"]) == sorted(names) and info
        info = wait_for(all_live, timeout=60, what="every replica listed as live")
        assert info["replica"] == names[1]
        assert {x["url"] for x in info["replicas"]} == {r.url for r in replicas}
        shown = Cli(bin_dir / "trainer", replicas[2].url)("info")
        assert shown.returncode == 0, shown.stderr
        assert f"{names[2]} (answered)" in shown.stdout, shown.stdout
        for name in names:
            assert name in shown.stdout, shown.stdout

        clis = [Cli(bin_dir / "trainer", r.url) for r in replicas]
        prepare(clis[0])
        sampler = Sampler(postgres_server, database, data_dir)
        run_ids = [start_run_id(clis[i % REPLICAS], plan_text(max_steps=6)) for i in range(RUNS)]

        # The victim: a replica driving a run whose job trains.
        def victim_with_a_training_run():
            owner = postgres_server.psql(
                database, "SELECT t.owner FROM tasks t JOIN runs r ON r.id = t.id "
                          "WHERE t.kind = 'run' AND t.phase = 'TRAINING' AND t.owner <> '' LIMIT 1;")
            return owner or None
        victim_name = wait_for(victim_with_a_training_run, timeout=300, what="a run training")
        victim = names.index(victim_name)
        fences_before = dict(line.split("|") for line in postgres_server.psql(
            database, "SELECT id, fence FROM tasks WHERE kind = 'run' AND owner = :'owner' AND NOT terminal;",
            owner=victim_name).splitlines())
        os.kill(replicas[victim].proc.pid, signal.SIGKILL)
        replicas[victim].proc.wait(timeout=30)
        killed_at = time.time()
        wait_for(lambda: open_runs_of(postgres_server, database, victim_name) == 0, timeout=120,
                 what=f"the open runs of the killed replica {victim_name} taken over", interval=0.1)
        takeover = time.time() - killed_at
        survivors = [i for i in range(REPLICAS) if i != victim]
        taken = postgres_server.psql(
            database, "SELECT id, owner, fence FROM tasks WHERE kind = 'run';").splitlines()
        for line in taken:
            run_id, owner, fence = line.split("|")
            if run_id in fences_before and owner:
                assert owner in {names[i] for i in survivors}, line
                assert int(fence) > int(fences_before[run_id]), f"a new lease, a new fence: {line}"

        # Every run ends; `runs wait` on one survivor follows the runs whichever replica drives them.
        follower = clis[survivors[0]]
        for run_id in run_ids:
            waited = follower("runs", "wait", run_id, "--timeout", "10m", timeout=660)
            assert waited.returncode == 0, (run_id, waited.stdout, waited.stderr)
        runs = {run_id: get_run(follower, run_id) for run_id in run_ids}
        for run_id, run in runs.items():
            assert run["phase"] in TERMINAL
            assert run["phase"] == "COMPLETED", (run_id, run.get("failureReason"), run.get("attempts"))
            assert run["progress"]["step"] == 6, run["progress"]
        wait_for(lambda: postgres_server.psql(database, "SELECT COUNT(*) FROM claims;") == "0", timeout=60,
                 what="no claim left")
        sampler.stop()

        twice = {key: sorted(pids) for key, pids in sampler.starts.items() if len(pids) > 1}
        assert not twice, f"an attempt's job started more than once: {twice}"
        for run_id, run in runs.items():
            assert f"{run_id}/attempt-{run['attempt']}" in sampler.starts, f"{run_id}'s job was seen"
        assert sampler.most_granted.get("cpu", 0) <= POOL_DEVICES, sampler.most_granted
        assert sampler.most_granted.get("cpu", 0) >= 1, "the sampler saw grants"
        replica_of = {r.proc.pid: names[i] for i, r in enumerate(replicas)}
        started_by = {}
        for pids in sampler.starts.values():
            for pid in pids:
                who = replica_of.get(sampler.parents.get(pid), "another process")
                started_by[who] = started_by.get(who, 0) + 1
        attempts = sum(run["attempt"] for run in runs.values())
        print(f"\nreplicas: {REPLICAS} on one PostgreSQL (lease {LEASE_SECONDS} s); runs: {RUNS} submitted "
              f"round-robin, {sum(r['phase'] == 'COMPLETED' for r in runs.values())} COMPLETED, 0 lost; "
              f"attempts: {attempts}; jobs seen: {len(sampler.starts)}, started twice: {len(twice)}; "
              f"jobs by starter: {started_by}; killed {victim_name} holding {len(fences_before)} open runs, "
              f"taken over after {takeover:.1f} s; most devices granted at once: "
              f"{sampler.most_granted.get('cpu', 0)} of {POOL_DEVICES} ({sampler.samples} samples); claims left: 0")
    finally:
        if sampler is not None:
            sampler.stop()
        for r in replicas:
            stop(r.proc, None)
        if replicas:
            stop(replicas[0].proc, data_dir)


# The gauges every replica would compute alike from the shared store (telemetry/registry.yaml):
# published by one replica of the fleet only, so that a sum over `instance` counts them once.
FLEET_GAUGES = ("akka_optimize_training_pool_claims", "akka_optimize_training_pool_devices_claimed",
                "akka_optimize_training_pool_devices_declared", "akka_optimize_training_pool_devices_observed",
                "akka_optimize_training_workload_devices_claimed", "akka_optimize_training_workload_devices_quota",
                "akka_optimize_training_run_active", "akka_optimize_training_pipeline_active")


def fleet_samples(url: str) -> dict[str, list[tuple[str, float]]]:
    """The fleet gauges' samples in the replica's /metrics: family -> [(instance, value)]."""
    with urllib.request.urlopen(url + "/metrics", timeout=30) as r:
        text = r.read().decode()
    samples: dict[str, list[tuple[str, float]]] = {}
    for line in text.splitlines():
        m = re.match(r'^([a-z_]+)\{([^}]*)\} (\S+)$', line)
        if m and m.group(1) in FLEET_GAUGES:
            instance = re.search(r'instance="([^"]*)"', m.group(2))
            samples.setdefault(m.group(1), []).append((instance.group(1) if instance else "", float(m.group(3))))
    return samples


@pytest.mark.timeout(300)
def test_the_fleets_gauges_come_from_one_replica_and_another_takes_them_over_when_it_dies(bin_dir, tiny_model,
                                                                                          postgres_server, tmp_path):
    url = create_database(postgres_server, "gauges")
    config = replicas_config(tiny_model, url, POOL_DEVICES)
    data_dir = tmp_path / "shared-data"
    replicas = []
    try:
        for i in range(2):
            replicas.append(start_trainerd(bin_dir, tmp_path / f"r{i}", config, data_dir=data_dir,
                                           args=("--instance", f"r{i}", "--lease-seconds", str(LEASE_SECONDS))))

        def reporters(among):
            """{index: that replica's fleet samples} for the replicas in `among` that publish any."""
            found = {i: fleet_samples(replicas[i].url) for i in among}
            return {i: s for i, s in found.items() if s}

        # Both live: the one that started first publishes the fleet's gauges, under its instance.
        def r0_alone():
            found = reporters([0, 1])
            return found if list(found) == [0] else None
        both = wait_for(r0_alone, timeout=60, what="the fleet's gauges from r0 alone")
        declared = both[0]["akka_optimize_training_pool_devices_declared"]
        assert declared == [("r0", float(POOL_DEVICES))], declared
        assert {inst for family in both[0].values() for inst, _ in family} == {"r0"}, both[0]
        with urllib.request.urlopen(replicas[1].url + "/metrics", timeout=30) as r:
            assert r.status == 200  # the other answers its scrape, without the fleet's gauges

        # r0 dies: once its heartbeat is stale, r1 publishes them, under its own instance.
        os.kill(replicas[0].proc.pid, signal.SIGKILL)
        replicas[0].proc.wait(timeout=30)
        taken = wait_for(lambda: reporters([1]).get(1), timeout=60, what="r1 publishing the fleet's gauges")
        assert taken["akka_optimize_training_pool_devices_declared"] == [("r1", float(POOL_DEVICES))], taken

        # r0 started again is a newer replica than r1: r1 keeps them, r0 leaves them out.
        replicas[0] = start_trainerd(bin_dir, tmp_path / "r0", config, data_dir=data_dir,
                                     args=("--instance", "r0", "--lease-seconds", str(LEASE_SECONDS)))
        wait_for(lambda: len(call(f"{replicas[0].url}/v1/info")[1]["replicas"]) == 2, timeout=60,
                 what="both replicas live")
        assert list(reporters([0, 1])) == [1]
    finally:
        for r in replicas:
            stop(r.proc, None)
        if replicas:
            stop(replicas[0].proc, data_dir)
