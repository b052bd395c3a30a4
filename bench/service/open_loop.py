#!/usr/bin/env python3
"""API latency at a fixed request rate (open loop), with 10,000 runs stored, and with followers.

    TRAINER_BUILD_DIR=build .venv/bin/python bench/service/open_loop.py \\
        [--builds /work/main/build build] [--runs 10000] [--rate 1000] [--seconds 10] [--followers 500]
    TRAINER_BUILD_DIR=build .venv/bin/python bench/service/open_loop.py --store postgres \\
        [--replicas 1 3] [--admission 1000] [--clients 8]

With --store postgres the state is in a throwaway PostgreSQL server (tools/test-postgres; fsync off)
and each build (BUILD, or BUILD@N with store.poolSize N) is measured with each number of --replicas
on that one database and data folder, the requests spread over the replicas in turn (no followers);
--admission N then queues N runs (at the first measurement) and measures admission decisions per
second (admission()). The last build fills the data.

Fills one data folder once through the API (runs submitted while one run holds the only
device, then cancelled: real run records with phase history, events and claims), then for each
build given: starts its trainerd on a copy of that folder and measures, with vegeta at a fixed
rate (open loop: requests leave on schedule whether or not earlier ones were answered, so a
stall shows as latency instead of as fewer requests):
  - GET /v1/runs/{id} (random ids of the stored runs)
  - GET /v1/runs?limit=50
  - GET /v1/runs/{id} again while `--followers` clients are parked on the events long poll of
    an open run (GET /v1/runs/{id}/events?after=LAST&waitSeconds=60).
Prints p50/p90/p99/max and the share of 2xx answers for each. vegeta comes from the Go module
proxy: `go install github.com/tsenart/vegeta/v12@latest` (put ~/go/bin on PATH or pass
--vegeta). Run by hand; nothing here asserts a speed.

Figures (2026-12-01, 2 shared CPUs under load 6-8 from other builds; 10,001 runs; 1000 req/s, 10 s):
  route                              before (httplib, 64 threads)     after (Beast, src/http)
  GET /v1/runs/{id}                  p99 1529 ms, 100% 200            p99 3.5 ms, 100% 200
  GET /v1/runs?limit=50              p99 30 s (timeouts), 37% 200     p99 6.4 s, 60% 200 (27% 503 at
                                                                      the connection limit): the
                                                                      service's list costs ~1.3-2.5 ms
                                                                      of CPU, more than 2 cores give
  GET /v1/runs/{id} + 500 followers  0% answered (all threads held)   p50 1 ms, 88% 200 (the list
                                                                      phase's backlog still draining)
With the page cache and the store's memory map (wt-perf; figures in README.md): lists p50 0.84 ms,
p99 8.9 ms, 100% 200; gets p99 3.0 ms; gets + 500 followers p50 0.95 ms, p99 462 ms, 100% 200.
With parked polls off the workers and one poll per run (issue 9, README.md): gets + 500 followers
p99 4.1-398 ms, 100% 200, where main in the same rounds answered 25-87% with a p99 of 1.6-8.4 s.
"""
import argparse
import json
import os
import pathlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
import urllib.error

from bench_support import REPO, Daemon, call, fill, setup


def vegeta(binary, targets, rate, seconds, tmp):
    """vegeta at `rate` requests/s for `seconds` over `targets` (GET URLs, in turn), each with the
    token kept for its address."""
    from auth import auth_headers
    path = tmp / "targets.txt"
    path.write_text("".join(f"GET {t}\n" + "".join(f"{k}: {v}\n" for k, v in auth_headers(t).items()) + "\n"
                            for t in targets))
    attack = subprocess.run([binary, "attack", f"-rate={rate}/s", f"-duration={seconds}s", f"-targets={path}",
                             "-timeout=30s", "-keepalive=true"], capture_output=True, timeout=seconds + 120)
    report = subprocess.run([binary, "report", "-type=json"], input=attack.stdout, capture_output=True,
                            timeout=60)
    doc = json.loads(report.stdout)
    lat = doc["latencies"]
    return {"p50": lat["50th"] / 1e6, "p90": lat["90th"] / 1e6, "p99": lat["99th"] / 1e6, "max": lat["max"] / 1e6,
            "ok": doc["success"], "requests": doc["requests"], "codes": doc.get("status_codes", {})}


def follow(port, run_id, after, n):
    from auth import auth_headers
    socks = []
    token = "".join(f"{k}: {v}\r\n" for k, v in auth_headers(f"http://127.0.0.1:{port}").items())
    req = (f"GET /v1/runs/{run_id}/events?after={after}&waitSeconds=60 HTTP/1.1\r\nHost: x\r\n{token}\r\n").encode()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(req)
        socks.append(s)
    return socks


def measure(build, data_src, ids, args, env, config, tmp):
    data = tmp / ("data-" + str(abs(hash(str(build)))))
    if data.exists():
        shutil.rmtree(data)
    shutil.copytree(data_src, data)
    d = Daemon(build, data, config, env, open(tmp / f"{data.name}.log", "wb"))
    out = {}
    try:
        sample = random.Random(0).sample(ids, min(2000, len(ids)))
        gets = [f"{d.url}/v1/runs/{i}" for i in sample]
        # Warm up (page cache, connections), then measure.
        vegeta(args.vegeta, gets, 200, 2, tmp)
        out["GET /v1/runs/{id}"] = vegeta(args.vegeta, gets, args.rate, args.seconds, tmp)
        out["GET /v1/runs?limit=50"] = vegeta(args.vegeta, [f"{d.url}/v1/runs?limit=50"], args.rate, args.seconds,
                                              tmp)
        if args.followers:
            out.update(followers(d, gets, args, tmp))
        if args.admission:
            out[f"admission, {args.admission} queued"] = admission([d], args, queue=True)
    finally:
        d.stop()
        from service_helpers import kill_jobs_under
        kill_jobs_under(data)  # the stand-in job of the open run, by pid
    return out


def followers(d, gets, args, tmp):
    """The gets again while `args.followers` clients are parked on an open run's events."""
    from service_helpers import plan
    out = {}
    # An open run (it holds the device: queued for an hour) and followers parked on it.
    open_run = call(d.url + "/v1/runs", "POST", plan(workload="bench"))["runId"]
    deadline = time.time() + 30
    while time.time() < deadline and call(d.url + f"/v1/runs/{open_run}")["phase"] != "QUEUED":
        time.sleep(0.1)
    last = call(d.url + f"/v1/runs/{open_run}/events")["events"][-1]["seq"]
    socks = follow(d.port, open_run, last, args.followers)
    time.sleep(1)
    try:
        out[f"GET /v1/runs/{{id}} + {args.followers} followers"] = vegeta(args.vegeta, gets, args.rate,
                                                                          args.seconds, tmp)
    finally:
        for s in socks:
            s.close()
    try:
        call(d.url + f"/v1/runs/{open_run}/cancel", "POST", timeout=90)
    except Exception:
        pass
    return out


def variant(spec, config, tmp):
    """(build folder, config) of a --builds entry: BUILD, or BUILD@N for BUILD with store.poolSize N
    (a build from before the pool refuses the key: give it without @)."""
    build, _, size = spec.partition("@")
    if not size:
        return build, config
    doc = json.loads(pathlib.Path(config).read_text())
    doc["store"]["poolSize"] = int(size)
    sized = tmp / f"config-pool{size}.json"
    sized.write_text(json.dumps(doc))
    return build, sized


def measure_replicas(spec, data, ids, args, env, config, tmp, replicas, queue):
    """The gets and lists with `replicas` trainerds of `spec` (variant()) on the one PostgreSQL
    database and data folder (not copied: these reads change nothing), the requests spread over them
    in turn; then the admission decisions when --admission asks for them (`queue`: queue the runs
    first; else the ones an earlier measurement queued are still there)."""
    build, config = variant(spec, config, tmp)
    tag = f"{abs(hash(spec))}-{replicas}"
    daemons = [Daemon(build, data, config, env, open(tmp / f"pg-{tag}-r{i}.log", "wb"), name=f"r{i}")
               for i in range(replicas)]
    out = {}
    try:
        sample = random.Random(0).sample(ids, min(2000, len(ids)))
        gets = [f"{daemons[k % replicas].url}/v1/runs/{i}" for k, i in enumerate(sample)]
        lists = [f"{d.url}/v1/runs?limit=50" for d in daemons]
        vegeta(args.vegeta, gets, 200, 2, tmp)
        out["GET /v1/runs/{id}"] = vegeta(args.vegeta, gets, args.rate, args.seconds, tmp)
        out["GET /v1/runs?limit=50"] = vegeta(args.vegeta, lists, args.rate, args.seconds, tmp)
        if args.admission:
            # The runs queued by the first measurement stay queued for the next.
            out[f"admission, {args.admission} queued"] = admission(daemons, args, queue=queue)
    finally:
        for d in daemons:
            d.stop()
        from service_helpers import kill_jobs_under
        kill_jobs_under(data)
    return out


def admission(daemons, args, queue: bool):
    """Admission decisions per second with `args.admission` runs queued: one run holds the pool's
    only device (the stand-in job queues for an hour), the others wait behind it; then
    `args.clients` clients change a second workload's quota for `args.seconds` s, through the
    replicas in turn. With `queue` false, the runs an earlier call queued are still there. The runs
    are left queued: cancelling 1,000 of them one by one costs longer than the bench. Each change runs one admission pass over every claim in its transaction
    (workloads.cpp: a larger quota may admit queued claims), under the admission lock
    (PostgreSQL: pg_advisory_xact_lock), so its rate is the rate of admission decisions."""
    import concurrent.futures
    from service_helpers import plan
    url = daemons[0].url
    try:
        call(url + "/v1/workloads", "POST", {"name": "probe"})
    except urllib.error.HTTPError as e:
        if e.code != 409:  # made by an earlier measurement
            raise
    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda i: call(daemons[i % len(daemons)].url + "/v1/runs", "POST",
                                              plan(workload="bench", description=f"queued {i}"))["runId"],
                               range(args.admission + 1 if queue else 0)))
    deadline = time.time() + 120
    while time.time() < deadline:
        waiting = call(url + "/v1/runs?phase=WAITING_FOR_DEVICES&limit=1")["total"]
        if waiting >= args.admission:
            break
        time.sleep(0.5)
    latencies = []
    stop_at = time.time() + args.seconds

    refused = []

    def client(k):
        n = 0
        while time.time() < stop_at:
            d = daemons[(k + n) % len(daemons)]
            began = time.perf_counter()
            try:
                call(d.url + "/v1/workloads/probe", "PATCH", {"gpuQuota": 1 + (n % 2)})
            except urllib.error.HTTPError as e:  # 503: a lock not had within lock_timeout
                refused.append(e.code)
                continue
            latencies.append((time.perf_counter() - began) * 1000)
            n += 1
        return n

    began = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.clients) as pool:
        decisions = sum(pool.map(client, range(args.clients)))
    elapsed = time.time() - began
    latencies.sort()
    pick = lambda q: latencies[min(len(latencies) - 1, int(q * len(latencies)))]  # noqa: E731
    return {"p50": pick(0.5), "p90": pick(0.9), "p99": pick(0.99), "max": latencies[-1], "ok": 1.0,
            "requests": decisions, "codes": {"decisions/s": round(decisions / elapsed, 1), "queued": waiting, "refused": len(refused)}}


def start_postgres(tmp):
    """A throwaway PostgreSQL server (tools/test-postgres: fsync and synchronous_commit off) and a
    database `bench` on it; (its URL, the server's state folder)."""
    state = tmp / "postgres"
    out = subprocess.run([str(REPO / "tools" / "test-postgres"), "start", str(state)], capture_output=True, text=True,
                         check=True)
    server = out.stdout.strip().splitlines()[-1]
    subprocess.run(["psql", server, "-X", "-c", "CREATE DATABASE bench;"], capture_output=True, check=True)
    return server.rsplit("/", 1)[0] + "/bench", state


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", nargs="+", default=[os.environ.get("TRAINER_BUILD_DIR", str(REPO / "build"))])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--followers", type=int, default=500, help="0: no followers phase")
    ap.add_argument("--vegeta", default=shutil.which("vegeta") or str(pathlib.Path.home() / "go" / "bin" / "vegeta"))
    ap.add_argument("--data", help="reuse a filled data folder (from an earlier run) instead of filling one")
    ap.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite",
                    help="postgres: a throwaway PostgreSQL server holds the state; each build is measured "
                         "on it in turn (BUILD@N: with store.poolSize N)")
    ap.add_argument("--replicas", type=int, nargs="+", default=[1, 3],
                    help="postgres: measure with each of these numbers of replicas")
    ap.add_argument("--admission", type=int, default=0,
                    help="also admission decisions per second with this many runs queued (1000)")
    ap.add_argument("--clients", type=int, default=8, help="the admission measurement's concurrent clients")
    args = ap.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="trainerd-openloop-"))
    pg_state = None
    if args.store == "postgres":
        store_url, pg_state = start_postgres(tmp)
        config, env = setup(tmp, store_url)
    else:
        config, env = setup(tmp)
    try:
        if args.data:
            data = pathlib.Path(args.data)
            ids = json.loads((data.parent / "ids.json").read_text())
        else:
            # The last build fills (on PostgreSQL the newest is the quickest to fill with).
            data, ids = fill(variant(args.builds[-1], config, tmp)[0], tmp, args.runs, env, config)
            (data.parent / "ids.json").write_text(json.dumps(ids))
        if args.store == "postgres":
            results = {}
            for k, spec in enumerate(args.builds):
                for j, n in enumerate(args.replicas):
                    results[f"{spec[-20:]}, {n} replica{'s' if n > 1 else ''}"] = measure_replicas(
                        spec, data, ids, args, env, config, tmp, n, queue=k == 0 and j == 0)
        else:
            results = {b: measure(b, data, ids, args, env, config, tmp) for b in args.builds}
    finally:
        if pg_state is not None:
            subprocess.run([str(REPO / "tools" / "test-postgres"), "stop", str(pg_state)], capture_output=True)
    print(f"\nvegeta at {args.rate} requests/s for {args.seconds}s each, {len(ids)} runs stored "
          f"(machine: {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f})")
    print(f"{'build':28s} {'route':40s} {'p50 ms':>8s} {'p90 ms':>8s} {'p99 ms':>8s} {'max ms':>9s} {'2xx':>6s}  codes")
    for b, res in results.items():
        for name, r in res.items():
            print(f"{b[-28:]:28s} {name:40s} {r['p50']:8.2f} {r['p90']:8.2f} {r['p99']:8.2f} {r['max']:9.1f} "
                  f"{r['ok'] * 100:5.1f}%  {r['codes']}")
    print(f"(data and logs in {tmp})")


if __name__ == "__main__":
    main()
