#!/usr/bin/env python3
"""API latency under load: a loopback trainerd holding a few thousand runs, measured with wrk.

    TRAINER_BUILD_DIR=build .venv/bin/python bench/service/latency.py [--runs 3000] [--seconds 10]

Fills a temp data dir through the API (bench_support.fill: runs submitted while one long run
holds the only device, then cancelled, so each is a real run record with its phase history,
events and claim history), starts trainerd on it, then runs wrk against GET /v1/runs (a page of 50)
and GET /v1/runs/{id} (random ids). Prints requests/s and latency percentiles for each.
Run by hand; nothing here asserts a speed.
"""
import argparse
import os
import pathlib
import random
import re
import subprocess
import tempfile

from bench_support import BUILD, Daemon, call, fill, setup


def wrk(url, seconds, threads, connections, script=None):
    cmd = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{seconds}s", "--latency"]
    if script:
        cmd += ["-s", script]
    out = subprocess.run(cmd + [url], capture_output=True, text=True, timeout=seconds + 60).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    pct = dict(re.findall(r"^\s+(50|75|90|99)%\s+(\S+)", out, re.M))
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return rps, pct, int(errors.group(1)) if errors else 0, out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=3000)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--connections", type=int, default=16)
    args = ap.parse_args()

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="trainerd-bench-"))
    config, env = setup(tmp)
    data, ids = fill(BUILD, tmp, args.runs, env, config)
    d = Daemon(BUILD, data, config, env, open(tmp / "trainerd.log", "wb"))
    try:
        url = d.url
        total = call(url + "/v1/runs?limit=1")["total"]
        script = tmp / "get.lua"
        sample = random.sample(ids, min(1000, len(ids)))
        script.write_text("ids = {" + ",".join(f'"{i}"' for i in sample) + "}\n"
                          "request = function()\n"
                          "  return wrk.format('GET', '/v1/runs/' .. ids[math.random(#ids)])\n"
                          "end\n")
        results = {}
        results["list (GET /v1/runs, 50 per page)"] = wrk(url + "/v1/runs?limit=50", args.seconds, args.threads,
                                                          args.connections)
        results["get (GET /v1/runs/{id})"] = wrk(url, args.seconds, args.threads, args.connections, str(script))
        results["capacity (GET /v1/capacity)"] = wrk(url + "/v1/capacity", args.seconds, args.threads,
                                                     args.connections)
        print(f"\nwrk -t{args.threads} -c{args.connections} -d{args.seconds}s against {total} runs "
              f"(machine: {os.cpu_count()} CPUs)")
        print(f"{'route':40s} {'req/s':>9s} {'p50':>9s} {'p90':>9s} {'p99':>9s} {'non-2xx':>8s}")
        for name, (rps, pct, errors, _) in results.items():
            print(f"{name:40s} {rps:9.0f} {pct.get('50', '?'):>9s} {pct.get('90', '?'):>9s} "
                  f"{pct.get('99', '?'):>9s} {errors:8d}")
    finally:
        d.stop()
        print(f"(data and log in {tmp})")


if __name__ == "__main__":
    main()
