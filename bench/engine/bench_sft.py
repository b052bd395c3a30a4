#!/usr/bin/env python3
"""LoRA SFT side by side on this CPU: the native engine (trainer-job run) against TRL's
SFTTrainer + PEFT as it comes (`trl`), with its head compacted to the labelled positions
(`trl-compact`, what a competent user does on the CPU) and optionally that under torch.compile
(`trl-compile`). Same random Qwen3-architecture model, data, batch, sequence length, steps and
threads. Every turn of every side is a fresh process, the sides alternate (bench/common/sides.py),
and each child's peak RSS comes from wait4. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/engine/bench_sft.py [--hidden 256 --layers 4]
        [--sides native,trl,trl-compact] [--pairs 3] [--steps 12 --skip 3] [--threads 2]

All sides: fp32, batch 4 rows padded to the longest, no packing, no gradient checkpointing, LoRA
r=16 alpha=32 dropout 0 on q/k/v/o/gate/up/down, AdamW lr 1e-4 linear, loss on the completion
only. Tokens/s counts non-padding tokens over the steps after the first `--skip`, between
wall-clock step boundaries (native: its step events as they arrive; TRL: a callback's timestamps
and its `num_tokens`). Useful GFLOP/s: the native side's `usefulFlops` per non-padding token
(from its step events) x each side's tokens/s, set against the measured fp32 GEMM peak.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import random
import statistics
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import gemm, sides, workload  # noqa: E402

SIDES = ("native", "trl", "trl-compact", "trl-compile")
LOSS_AGREEMENT = 1e-5  # relative: the compacted peers must compute plain TRL's loss


def make_data(path, rows, seed=0):
    """Prompt/completion rows of similar length (~150-230 tokens), so all sides' batches match."""
    rnd = random.Random(seed)
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
             "upsilon phi chi psi omega river mountain forest ocean desert valley city village road bridge").split()
    with open(path, "w") as f:
        for _ in range(rows):
            prompt = "Summarize: " + " ".join(rnd.choice(words) for _ in range(rnd.randint(90, 120)))
            completion = " " + " ".join(rnd.choice(words) for _ in range(rnd.randint(40, 60)))
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def native_turn(args, work, env, pair) -> sides.Figure:
    out = work / f"native-{pair}"
    child = sides.checked(sides.run_child([workload.trainer_job(), "run", "--plan", work / "plan.json",
                                           "--output", out], env), "trainer-job")
    steps = [(t, r) for t, r in child.records if r.get("type") == "step"]
    if len(steps) <= args.skip:
        raise SystemExit(f"trainer-job gave {len(steps)} step events, fewer than --skip {args.skip} + 1")
    timed = [r for _, r in steps[args.skip:]]
    tokens = sum(r["batchTokens"] for r in timed)
    flops = [r.get("usefulFlops") for r in timed]
    return sides.Figure(tokens / (steps[-1][0] - steps[args.skip - 1][0]), child,
                        {"first_step_s": steps[0][0], "first_loss": steps[0][1].get("loss"),
                         "step_phase_tokens_per_s": tokens / sum(r["stepSeconds"] for r in timed),
                         "useful_flops_per_token": sum(flops) / tokens if None not in flops else None,
                         "tokens_per_cpu_s": tokens / child.cpu_seconds})


def trl_turn(args, work, env, side, pair) -> sides.Figure:
    t0 = time.time()
    child = sides.checked(sides.run_child([sys.executable, HERE / "peer_sft.py", side, t0, work / "model",
                                           work / "train.jsonl", args.steps, args.threads, work / f"{side}-{pair}"],
                                          env), side)
    steps = [r["t"] for r in child.of_type("step")]
    logs = {r["step"]: r["num_tokens"] for r in child.of_type("log")}
    tokens = logs[args.steps] - logs[args.skip]
    first = child.of_type("first_loss")
    return sides.Figure(tokens / (steps[-1] - steps[args.skip - 1]), child,
                        {"first_step_s": steps[0], "first_loss": first[0]["loss"] if first else None,
                         "tokens_per_cpu_s": tokens / child.cpu_seconds})


def main():
    ap = argparse.ArgumentParser()
    sides.add_arguments(ap, SIDES, "native,trl,trl-compact")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--skip", type=int, default=3, help="steps left out of the throughput (warm-up)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    workload.work_argument(ap)
    args = ap.parse_args()
    chosen = sides.chosen(args, SIDES)
    if not 1 <= args.skip < args.steps:
        raise SystemExit(f"--skip must be at least 1 and below --steps ({args.steps}), not {args.skip}")
    if args.hidden % 8:
        raise SystemExit(f"--hidden must be a multiple of 8 (8 heads), not {args.hidden}")
    with workload.work_folder(args.work, "bench-sft-") as work:
        return run(args, chosen, work)


def write_workload(work: pathlib.Path, hidden: int, layers: int, steps: int) -> pathlib.Path:
    """The model, data and plan of this benchmark in work; returns the plan's path (profile_step.py runs it too)."""
    workload.qwen3_model(work / "model", hidden, layers, heads=8, kv_heads=4, head_dim=hidden // 8)
    make_data(work / "train.jsonl", rows=4 * steps + 8)
    plan = {"kind": "run", "workload": "bench", "baseModel": str(work / "model"),
            "config": {"dataset": str(work / "train.jsonl"), "method": "sft",
                       "hyperparams": {"lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
                                       "optimizer": {"learningRate": 1e-4, "schedule": "linear"},
                                       "training": {"maxSteps": steps, "batchSize": 4, "seed": 42}},
                       "maxSeqLength": 256, "model": {"precision": "FP32"}},
            "execution": {"gpus": 0}}
    (work / "plan.json").write_text(json.dumps(plan))
    return work / "plan.json"


def run(args, chosen: list[str], work: pathlib.Path) -> int:
    write_workload(work, args.hidden, args.layers, args.steps)
    vocab = json.loads((work / "model" / "config.json").read_text())["vocab_size"]
    print(f"model: Qwen3 architecture, {args.layers} layers, hidden {args.hidden}, vocab {vocab}; batch 4 padded, "
          f"no packing, maxSeqLength 256, {args.steps} steps (first {args.skip} left out), {args.threads} threads, "
          f"fp32, LoRA r16 on 7 modules")
    peak = gemm.fp32_gemm_peak(args.threads)
    env = workload.thread_env(args.threads)

    def turn(side, pair):
        return native_turn(args, work, env, pair) if side == "native" else trl_turn(args, work, env, side, pair)

    turns = sides.alternate(chosen, args.pairs, turn, "tokens/s")
    result = sides.report(turns, "tokens/s")
    return 0 if print_details(turns, chosen, result["median"], peak) else 1


def print_details(turns, chosen, medians, peak) -> bool:
    """First losses, time to the first step, tokens per CPU-second and useful GFLOP/s per side.
    False when a compacted peer's loss is not plain TRL's."""
    fpt = sides.median_detail(turns, "native", "useful_flops_per_token")
    print(f"\nuseful FLOPs per non-padding token (native usefulFlops): "
          f"{'n/a' if fpt is None else f'{fpt / 1e9:.3f} G'}; fp32 GEMM peak {peak / 1e9:.1f} GFLOP/s")
    print(f"  {'side':14}{'first-step loss':>18}{'start->1st step s':>19}{'tokens/cpu-s':>14}"
          f"{'useful GFLOP/s':>16}{'of GEMM peak':>14}")
    for side in chosen:
        loss = sides.median_detail(turns, side, "first_loss")
        first = sides.median_detail(turns, side, "first_step_s")
        per_cpu = sides.median_detail(turns, side, "tokens_per_cpu_s")
        achieved = None if fpt is None else fpt * medians[side]
        print(f"  {side:14}{'n/a' if loss is None else f'{loss:.6f}':>18}{first:19.2f}{per_cpu:14.1f}"
              f"{'n/a' if achieved is None else f'{achieved / 1e9:.1f}':>16}"
              f"{'n/a' if achieved is None else f'{achieved / peak:.1%}':>14}")
    ok = True
    plain = sides.median_detail(turns, "trl", "first_loss")
    for side in ("trl-compact", "trl-compile"):
        mine = sides.median_detail(turns, side, "first_loss")
        if plain is None or mine is None:
            continue
        rel = abs(mine - plain) / abs(plain)
        agree = rel <= LOSS_AGREEMENT
        ok = ok and agree
        print(f"first-step loss {side} {mine:.7f} vs trl {plain:.7f}: relative difference {rel:.1e} "
              f"({'agrees' if agree else 'DIFFERS'}, limit {LOSS_AGREEMENT:.0e})")
    if "native" in chosen:
        steps = statistics.median(t.figure.detail["step_phase_tokens_per_s"] for t in turns if t.side == "native")
        print(f"native tokens/s counted over its own step phase (stepSeconds, no input time): {steps:.1f}")
    return ok


if __name__ == "__main__":
    sys.exit(main())
