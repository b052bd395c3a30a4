#!/usr/bin/env python3
"""API latency under load: a loopback trainerd holding a few thousand runs, measured with wrk.

    TRAINER_BUILD_DIR=build .venv/bin/python bench/service/latency.py [--runs 3000] [--seconds 10]

Starts trainerd on a free port with a temp data dir, fills it through the API (runs submitted
while one long run holds the only device, then cancelled, so each is a real run record with
its phase history, events and claim history), then runs wrk against GET /v1/runs (a page of 50)
and GET /v1/runs/{id} (random ids). Prints requests/s and latency percentiles for each.
Run by hand; nothing here asserts a speed.
"""
import argparse
import concurrent.futures
import json
import os
import pathlib
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "tests" / "python" / "service"))


def call(url, method="GET", body=None):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as r:
        return json.loads(r.read())


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

    from models import make_tiny_model
    from service_helpers import CHAT_ROWS, jsonl, plan

    tmp = pathlib.Path(tempfile.mkdtemp(prefix="trainerd-bench-"))
    model = make_tiny_model(tmp / "model", arch="qwen3", tokenizer="qwen3", seed=0)
    behaviour = tmp / "standin.json"
    behaviour.write_text(json.dumps({"queueSeconds": 3600}))
    config = {"baseModels": [{"name": "tiny/qwen3", "path": str(model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
              "jobBinary": str(REPO / "tests" / "python" / "service" / "standin_job.py")}
    (tmp / "config.json").write_text(json.dumps(config))
    port_file = tmp / "port"
    log = open(tmp / "trainerd.log", "wb")
    proc = subprocess.Popen([str(BUILD / "apps" / "trainerd"), "--data-dir", str(tmp / "data"), "--port", "0",
                             "--port-file", str(port_file), "--config", str(tmp / "config.json")],
                            stdout=log, stderr=log, env=dict(os.environ, TRAINER_STANDIN_FILE=str(behaviour)))
    holder = None
    try:
        while not port_file.exists() or not port_file.read_text().strip():
            time.sleep(0.05)
        url = f"http://127.0.0.1:{port_file.read_text().strip()}"
        while True:
            try:
                if call(url + "/v1/info")["startup"]["ready"]:
                    break
            except Exception:
                time.sleep(0.05)
        call(url + "/v1/base-models/select", "POST", {"name": "tiny/qwen3"})
        while call(url + "/v1/base-models/tiny/qwen3")["status"] != "ready":
            time.sleep(0.05)
        call(url + "/v1/workloads", "POST", {"name": "bench"})
        call(url + "/v1/datasets", "POST", {"name": "train", "rows": jsonl(CHAT_ROWS)})
        holder = call(url + "/v1/runs", "POST", plan(workload="bench"))["runId"]

        started = time.time()

        def one(i):
            run = call(url + "/v1/runs", "POST", plan(workload="bench", description=f"bench run {i}"))
            call(url + f"/v1/runs/{run['runId']}/cancel", "POST")
            return run["runId"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(one, range(args.runs)))
        fill = time.time() - started
        total = call(url + "/v1/runs?limit=1")["total"]
        print(f"filled {total} runs through the API in {fill:.1f}s "
              f"({2 * args.runs / fill:.0f} submit+cancel requests/s)")

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
        if holder:
            try:
                call(url + f"/v1/runs/{holder}/cancel", "POST")
                time.sleep(1)
            except Exception:
                pass
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
        print(f"(data and log in {tmp})")


if __name__ == "__main__":
    main()
