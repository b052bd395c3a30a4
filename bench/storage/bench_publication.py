#!/usr/bin/env python3
"""Snapshot publication throughput and pause latency on this machine, side by side with the raw
write speed of the same destination. Run by hand (not in CI); nothing here asserts a speed.

For each artifact store (the local data folder, and a real SeaweedFS `weed` S3 server on loopback):
- a real trainerd runs a real job that saves every step (`execution.saveEvery: 1`); each
  snapshot's publication time is read from the catalog: from its reservation (`createdAt`) to
  the last kind's `committedAt` (upload of both kinds, the catalog reading them back and
  committing). Throughput = the snapshot's bytes / that time; the median over the snapshots.
- the peer: the same number of bytes written raw, the same number of times. Folder: `dd
  conv=fsync` into the data folder's file system. S3: a plain SigV4-signed PUT through `curl`
  to the same bucket of the same `weed`.
Then pause latency: runs paused with `--checkpoint save` and with `--checkpoint latest`, the time
from the request (`pause.requestedAt`) to `resourcesReleased` (`pause.releasedAt`), median of
--pauses each.

    TRAINER_BUILD_DIR=build .venv/bin/python bench/storage/bench_publication.py [--steps 12]
        [--rank 64] [--pauses 3] [--hidden 256] [--layers 4] [--skip-s3]
"""
from __future__ import annotations

import argparse
import datetime
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "tests" / "python" / "cli"))

MODEL = "bench-qwen3"
DATASET = "sentiment-train"
WORKLOAD = "bench"
BUCKET = "trainer-artifacts"


def stamp(text: str) -> float:
    return datetime.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


def plan(steps: int, rank: int, save_every: int | None) -> str:
    execution = "{gpus: 0" + (f", saveEvery: {save_every}, keepAdapters: 1000, keepTrainingStates: 1000"
                              if save_every else "") + "}"
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  hyperparams:", "    optimizer: {learningRate: 0.003}", f"    training: {{maxSteps: {steps}, batchSize: 4}}",
        f"    lora: {{rank: {rank}, alpha: {2 * rank}}}", "  maxSeqLength: 128", "  model: {precision: FP32}",
        f"execution: {execution}"]) + "\n"


def start_service(tmp: pathlib.Path, model: pathlib.Path, store: dict | None):
    from cli_support import EXAMPLES, Cli, start_trainerd
    config = {"baseModels": [{"name": MODEL, "path": str(model)}]}
    if store:
        config["artifactStore"] = store
    service = start_trainerd(BUILD / "apps", tmp, config)
    cli = Cli(BUILD / "apps" / "trainer", service.url)
    cli("base-models", "select", MODEL, "--wait", "--timeout", "5m", check=True)
    cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET, check=True)
    cli("workloads", "create", WORKLOAD, check=True)
    return service, cli


def run_to_end(cli, text: str) -> str:
    run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=text, check=True).stdout.strip()
    cli("runs", "wait", run_id, "--timeout", "30m", "--exit-status", "-q", check=True, timeout=2000)
    return run_id


def publications(cli, run_id: str) -> list[tuple[int, float]]:
    """(bytes, seconds from reservation to the last commit) of each of the run's snapshots."""
    out = []
    for s in cli.json("runs", "snapshots", run_id, "--limit", "100")["snapshots"]:
        kinds = [k for k in s["kinds"].values() if k.get("state") == "committed"]
        seconds = max(stamp(k["committedAt"]) for k in kinds) - stamp(s["createdAt"])
        out.append((sum(k["bytes"] for k in kinds), seconds))
    return out


def last_commits(cli, run_id: str) -> list[tuple[int, float]]:
    """(bytes, seconds) of the weights' commit where it followed the trainingState's: the job
    uploads both kinds, then commits them one after the other, so the gap between the two
    committedAt is one commit alone (trainerd reads the kind back, hashes it, writes the store)."""
    out = []
    for s in cli.json("runs", "snapshots", run_id, "--limit", "100")["snapshots"]:
        k = s["kinds"]
        if k.get("weights", {}).get("state") == "committed" and k.get("trainingState", {}).get("state") == "committed":
            gap = stamp(k["weights"]["committedAt"]) - stamp(k["trainingState"]["committedAt"])
            out.append((k["weights"]["bytes"], gap))
    return out


def dd_seconds(folder: pathlib.Path, payload: pathlib.Path) -> float:
    """`dd conv=fsync` of the payload (random bytes, read from the page cache) into `folder`."""
    target = folder / "dd.bin"
    t0 = time.perf_counter()
    subprocess.run(["dd", f"if={payload}", f"of={target}", "bs=1M", "conv=fsync", "status=none"], check=True)
    seconds = time.perf_counter() - t0
    target.unlink()
    return seconds


def put_seconds(s3, payload: pathlib.Path, key: str) -> float:
    t0 = time.perf_counter()
    subprocess.run(["curl", "-sf", "-o", "/dev/null", "--aws-sigv4", "aws:amz:us-east-1:s3", "--user",
                    f"{s3.access_key}:{s3.secret_key}", "-T", str(payload), f"{s3.endpoint}/{BUCKET}/{key}"],
                   check=True, timeout=120)
    return time.perf_counter() - t0


def pause_seconds(cli, policy: str, steps: int, rank: int) -> float:
    """One run paused with `policy` once it trained a few steps (and, for latest, committed a
    snapshot): the service's request -> resourcesReleased time. The run is cancelled after."""
    from cli_support import wait_for
    run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan(steps, rank, 2),
                 check=True).stdout.strip()
    get = lambda: cli.json("runs", "get", run_id)  # noqa: E731
    wait_for(lambda: get().get("savedStep", 0) >= 2, what="a committed snapshot", timeout=600)
    cli("runs", "pause", run_id, "--checkpoint", policy, check=True)
    run = wait_for(lambda: (r := get())["phase"] == "PAUSED" and r["pause"]["resourcesReleased"] and r,
                   what="PAUSED", timeout=600)
    pause = run["pause"]
    assert pause["state"] == "paused", pause
    cli("runs", "cancel", run_id, "--force", check=True)
    return stamp(pause["releasedAt"]) - stamp(pause["requestedAt"])


def mib(bytes_per_s: float) -> str:
    return f"{bytes_per_s / 2**20:.1f} MiB/s"


def report_store(name: str, pubs: list[tuple[int, float]], raw_seconds: list[float],
                 commits: list[tuple[int, float]]) -> None:
    sizes = [b for b, _ in pubs]
    rates = [b / s for b, s in pubs if s > 0]
    raw = [statistics.median(sizes) / s for s in raw_seconds]
    print(f"\n{name}: {len(pubs)} snapshots, median {statistics.median(sizes) / 2**20:.2f} MiB each")
    print(f"  publication (reserve -> upload -> verify -> commit): median {statistics.median([s for _, s in pubs]):.3f}"
          f" s, {mib(statistics.median(rates))} (min {mib(min(rates))}, max {mib(max(rates))})")
    print(f"  raw write of the same size: median {statistics.median(raw_seconds):.3f} s, "
          f"{mib(statistics.median(raw))}")
    print(f"  ratio publication / raw: {statistics.median(rates) / statistics.median(raw):.2f}")
    if commits:
        print(f"  of which one commit (weights, {statistics.median([b for b, _ in commits]) / 2**20:.2f} MiB: read "
              f"back, hashed, stored): median {statistics.median([s for _, s in commits]):.3f} s, "
              f"{mib(statistics.median([b / s for b, s in commits if s > 0]))}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rank", type=int, default=64)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--pauses", type=int, default=3)
    ap.add_argument("--skip-s3", action="store_true")
    a = ap.parse_args()
    from cli_support import stop
    from models import make_tiny_model

    with tempfile.TemporaryDirectory(prefix="bench-storage-") as tmp_name:
        tmp = pathlib.Path(tmp_name)
        model = make_tiny_model(tmp / "model", arch="qwen3", tokenizer="qwen3", seed=0, hidden_size=a.hidden,
                                intermediate_size=2 * a.hidden, head_dim=a.hidden // 4, num_hidden_layers=a.layers)
        print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}; model hidden {a.hidden}, "
              f"{a.layers} layers, LoRA rank {a.rank}; {a.steps} steps, a snapshot (weights + trainingState) "
              f"after each")

        service, cli = start_service(tmp / "folder", model, None)
        try:
            run_id = run_to_end(cli, plan(a.steps, a.rank, 1))
            pubs = publications(cli, run_id)
            payload = tmp / "payload.bin"
            payload.write_bytes(os.urandom(int(statistics.median([b for b, _ in pubs]))))
            raw = [dd_seconds(service.data_dir, payload) for _ in pubs]
            report_store("local folder (write, fsync, rename)", pubs, raw, last_commits(cli, run_id))
            for policy in ("save", "latest"):
                times = [pause_seconds(cli, policy, 1000, a.rank) for _ in range(a.pauses)]
                print(f"  pause --checkpoint {policy}: request -> resourcesReleased median {statistics.median(times):.2f}"
                      f" s ({', '.join(f'{t:.2f}' for t in times)})")
        finally:
            stop(service.proc, service.data_dir)

        if a.skip_s3:
            return
        from s3_server import start_s3_server, stop_s3_server
        s3 = start_s3_server(tmp / "weed")
        os.environ["TRAINER_BENCH_S3_KEY"] = s3.access_key
        os.environ["TRAINER_BENCH_S3_SECRET"] = s3.secret_key
        store = {"uri": f"s3://{BUCKET}/bench", "endpoint": s3.endpoint, "accessKeyEnv": "TRAINER_BENCH_S3_KEY",
                 "secretKeyEnv": "TRAINER_BENCH_S3_SECRET"}
        try:
            service, cli = start_service(tmp / "s3", model, store)
            try:
                run_id = run_to_end(cli, plan(a.steps, a.rank, 1))
                pubs = publications(cli, run_id)
                size = int(statistics.median([b for b, _ in pubs]))
                payload = tmp / "payload.bin"
                payload.write_bytes(os.urandom(size))
                raw = [put_seconds(s3, payload, f"raw/put-{i}.bin") for i in range(len(pubs))]
                report_store(f"S3 (weed on loopback, {s3.endpoint})", pubs, raw, last_commits(cli, run_id))
                times = [pause_seconds(cli, "save", 1000, a.rank) for _ in range(a.pauses)]
                print(f"  pause --checkpoint save: request -> resourcesReleased median {statistics.median(times):.2f}"
                      f" s ({', '.join(f'{t:.2f}' for t in times)})")
            finally:
                stop(service.proc, service.data_dir)
        finally:
            stop_s3_server(s3.proc)


if __name__ == "__main__":
    main()
