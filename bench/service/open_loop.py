#!/usr/bin/env python3
"""API latency at a fixed request rate (open loop), with 10,000 runs stored, and with followers.

    TRAINER_BUILD_DIR=build .venv/bin/python bench/service/open_loop.py \\
        [--builds /work/main/build build] [--runs 10000] [--rate 1000] [--seconds 10] [--followers 500]

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

from bench_support import REPO, Daemon, call, fill, setup


def vegeta(binary, targets, rate, seconds, tmp):
    path = tmp / "targets.txt"
    path.write_text("".join(f"GET {t}\n\n" for t in targets))
    attack = subprocess.run([binary, "attack", f"-rate={rate}/s", f"-duration={seconds}s", f"-targets={path}",
                             "-timeout=30s", "-keepalive=true"], capture_output=True, timeout=seconds + 120)
    report = subprocess.run([binary, "report", "-type=json"], input=attack.stdout, capture_output=True,
                            timeout=60)
    doc = json.loads(report.stdout)
    lat = doc["latencies"]
    return {"p50": lat["50th"] / 1e6, "p90": lat["90th"] / 1e6, "p99": lat["99th"] / 1e6, "max": lat["max"] / 1e6,
            "ok": doc["success"], "requests": doc["requests"], "codes": doc.get("status_codes", {})}


def follow(port, run_id, after, n):
    socks = []
    req = (f"GET /v1/runs/{run_id}/events?after={after}&waitSeconds=60 HTTP/1.1\r\nHost: x\r\n\r\n").encode()
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=60)
        s.sendall(req)
        socks.append(s)
    return socks


def measure(build, data_src, ids, args, env, config, tmp):
    from service_helpers import plan
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
    finally:
        d.stop()
        from service_helpers import kill_jobs_under
        kill_jobs_under(data)  # the stand-in job of the open run, by pid
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--builds", nargs="+", default=[os.environ.get("TRAINER_BUILD_DIR", str(REPO / "build"))])
    ap.add_argument("--runs", type=int, default=10000)
    ap.add_argument("--rate", type=int, default=1000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--followers", type=int, default=500)
    ap.add_argument("--vegeta", default=shutil.which("vegeta") or str(pathlib.Path.home() / "go" / "bin" / "vegeta"))
    ap.add_argument("--data", help="reuse a filled data folder (from an earlier run) instead of filling one")
    args = ap.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="trainerd-openloop-"))
    config, env = setup(tmp)
    if args.data:
        data = pathlib.Path(args.data)
        ids = json.loads((data.parent / "ids.json").read_text())
    else:
        data, ids = fill(args.builds[0], tmp, args.runs, env, config)
        (data.parent / "ids.json").write_text(json.dumps(ids))
    results = {b: measure(b, data, ids, args, env, config, tmp) for b in args.builds}
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
