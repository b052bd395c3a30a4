#!/usr/bin/env python3
"""The user's view of native vs TRL: the same LoRA SFT plan submitted through the service
(`trainer runs start`) with `config.engine: native` and with `trl`, alternating (native, trl,
native, trl: `--rounds`), against a trainerd this script starts; the medians are printed. Prints, side by side, the wall time from submission to
COMPLETED (what a user waits), the time from submission to the first step, and tokens/s over the
steps after the first `--skip` (non-padding tokens of the steps / the wall time between their
events as trainerd recorded them), and the first step's loss of each. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/engine/bench_service.py [--steps 20] [--layers 4]

Same model (random Qwen3 architecture), data (bench_sft.make_data), batch 4, maxSeqLength 256,
fp32, LoRA r16 on 7 modules, AdamW lr 1e-4 linear as bench_sft.py; the engines' own numbers are
in bench_sft.py, this one adds the service, the job and (for TRL) the worker's startup.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "tests" / "python" / "cli"))
sys.path.insert(0, str(REPO / "bench" / "engine"))
os.environ.setdefault("XDG_CONFIG_HOME", tempfile.mkdtemp(prefix="bench-service-config-"))  # the trainerd's token


def plan(engine: str, steps: int) -> str:
    return "\n".join([
        "kind: run", "workload: bench", "baseModel: bench-model", "config:", "  dataset: bench-data",
        f"  engine: {engine}", "  hyperparams:", "    lora: {rank: 16, alpha: 32, dropout: 0.0}",
        "    optimizer: {learningRate: 0.0001, schedule: linear}",
        f"    training: {{maxSteps: {steps}, batchSize: 4, seed: 42}}",
        "  maxSeqLength: 256", "  model: {precision: FP32}", "execution: {gpus: 0, maxAttempts: 1}", ""])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--skip", type=int, default=3)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--work", default=None)
    ap.add_argument("--rounds", type=int, default=2, help="native then trl, this many times (A B A B): medians")
    args = ap.parse_args()
    import auth
    import models
    from bench_sft import make_data
    from cli_support import Cli, start_trainerd, stop

    auth.install()
    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench-service-"))
    model = work / "model"
    if not (model / "config.json").exists():
        models.make_tiny_model(model, arch="qwen3", tokenizer="qwen3", seed=0, hidden_size=args.hidden,
                               intermediate_size=3 * args.hidden, num_hidden_layers=args.layers,
                               num_attention_heads=8, num_key_value_heads=4, head_dim=args.hidden // 8)
    data = work / "train.jsonl"
    make_data(data, rows=4 * args.steps + 8)
    service = start_trainerd(build / "apps", work / "trainerd", {"baseModels": [{"name": "bench-model", "path": str(model)}]})
    try:
        cli = Cli(build / "apps" / "trainer", service.url)
        cli("base-models", "select", "bench-model", "--wait", "--timeout", "5m", check=True, timeout=400)
        cli("datasets", "create", "-f", data, "--name", "bench-data", check=True)
        cli("workloads", "create", "bench", check=True)
        rows = {"native": [], "trl": []}
        load_before = os.getloadavg()[0]
        for engine in ("native", "trl") * args.rounds:
            t0 = time.time()
            run = json.loads(cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(engine, args.steps),
                                 check=True).stdout)
            first = None
            while True:
                got = cli.json("runs", "get", run["runId"])
                if first is None and got["progress"].get("step", 0) >= 1:
                    first = time.time() - t0
                if got["phase"] in ("COMPLETED", "FAILED", "CANCELLED"):
                    break
                time.sleep(0.2)
            wall = time.time() - t0
            if got["phase"] != "COMPLETED":
                sys.exit(f"{engine}: {got['phase']}: {got.get('failureReason')}")
            steps = cli.json("runs", "metrics", run["runId"])["steps"]
            timed = steps[args.skip:]
            tokens = sum(s.get("batchTokens", 0) for s in timed)
            seconds = sum(s.get("stepSeconds", 0) for s in timed)
            rows[engine].append((wall, first, tokens / seconds if seconds else 0.0, steps[0]["loss"]))
            print(f"{engine:6s} round {len(rows[engine])}: COMPLETED in {wall:.1f} s, first step at {first:.1f} s, "
                  f"{rows[engine][-1][2]:.0f} tokens/s", flush=True)
        print(f"model: Qwen3 architecture, {args.layers} layers, hidden {args.hidden}; batch 4, maxSeqLength 256, "
              f"{args.steps} steps, fp32, LoRA r16 on 7 modules, through trainerd on this machine; "
              f"medians of {args.rounds} rounds, sides alternating (native, trl, native, trl, ...); "
              f"load average before {load_before:.1f}, after {os.getloadavg()[0]:.1f}")
        print(f"{'':34}{'native':>12}{'trl':>12}{'ratio':>8}")

        def median(engine):
            return tuple(statistics.median(r[i] for r in rows[engine]) for i in range(4))
        (wn, fn, tn, ln), (wt, ft, tt, lt) = median("native"), median("trl")
        print(f"{'submission → COMPLETED (s)':34}{wn:12.1f}{wt:12.1f}{wt / wn:8.2f}")
        print(f"{'submission → first step (s)':34}{fn:12.1f}{ft:12.1f}{ft / fn:8.2f}")
        print(f"{'tokens/s (step phase, after skip)':34}{tn:12.0f}{tt:12.0f}{tn / tt if tt else 0:8.2f}")
        print(f"{'first step loss':34}{ln:12.6f}{lt:12.6f}{'':>8}")
    finally:
        stop(service.proc, service.data_dir)


if __name__ == "__main__":
    main()
