#!/usr/bin/env python3
"""One training step of the native engine, profiled by operator: runs bench_sft.py's or bench_grpo.py's
workload with TRAINER_PROFILE_STEP (src/engine/train/step_profile.h), then prints the top operators by
self time (name and input shapes) and the step's time by part: the output head's products, the frozen
base's products, the LoRA products, the cross-entropy / log-softmax, attention, the rest. Run by hand:

    TRAINER_BUILD_DIR=build .venv/bin/python bench/engine/profile_step.py --method sft [--hidden 512 --layers 4]
    TRAINER_BUILD_DIR=build .venv/bin/python bench/engine/profile_step.py --method grpo [--hidden 256 --layers 4]

The profiled step is --step (default 3: after the allocator's and oneDNN's warm-up). Self times are
wall time on the calling thread, the OpenMP workers' share included.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "rl"))

from common import sides, workload  # noqa: E402


def part_of(op: dict, vocab: int, rank: int) -> str:
    """Which part of the step an operator's time belongs to, from its name and input shapes."""
    name, shapes = op["name"], op["shapes"]
    dims = [int(d) for d in shapes.replace("[", " ").replace("]", " ").replace(",", " ").split()]
    if "softmax" in name or "nll_loss" in name or "cross_entropy" in name:
        return "cross-entropy / log-softmax"
    if "attention" in name:
        return "attention"
    if name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::mkldnn_linear", "aten::linear", "aten::matmul",
                "mkldnn::_linear_pointwise"):
        if vocab in dims:
            return "head products"
        if rank in dims:
            return "LoRA products"
        return "base products"
    if vocab in dims:
        return "other vocabulary-wide (fill, exp, gather...)"
    return "other"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--method", choices=["sft", "grpo"], required=True)
    ap.add_argument("--hidden", type=int, default=None, help="default: 512 for sft, 256 for grpo")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--step", type=int, default=3, help="the step profiled (1-based)")
    ap.add_argument("--top", type=int, default=10)
    ap.add_argument("--threads", type=int, default=2)
    workload.work_argument(ap)
    a = ap.parse_args()
    if a.step < 1:
        raise SystemExit(f"--step must be at least 1, not {a.step}")
    hidden = a.hidden or (512 if a.method == "sft" else 256)
    with workload.work_folder(a.work, "profile-step-") as work:
        if a.method == "sft":
            import bench_sft

            plan = bench_sft.write_workload(work, hidden, a.layers, steps=a.step)
        else:
            import bench_grpo

            plan = bench_grpo.write_workload(work, hidden, a.layers, steps=a.step, group=8, prompts=4, new_tokens=64)
        out = work / "profile.json"
        env = dict(workload.thread_env(a.threads), TRAINER_PROFILE_STEP=str(a.step), TRAINER_PROFILE_OUT=str(out))
        sides.checked(sides.run_child([workload.trainer_job(), "run", "--plan", plan, "--output", work / "out"], env=env),
                      "trainer-job")
        doc = json.loads(out.read_text())
        vocab = json.loads((work / "model" / "config.json").read_text())["vocab_size"]
    step_s = doc["stepSeconds"]
    print(f"{a.method} step {doc['step']}: hidden {hidden}, {a.layers} layers, vocab {vocab}, fp32, LoRA r16 on 7 modules, "
          f"{a.threads} threads; step {step_s:.3f} s, operators' self time recorded {doc['recordedSelfSeconds']:.3f} s")
    print(f"\n| # | operator | input shapes | calls | self s | share of step |\n|---|---|---|---|---|---|")
    for i, op in enumerate(doc["operators"][:a.top], 1):
        shapes = op["shapes"] if len(op["shapes"]) <= 70 else op["shapes"][:67] + "..."
        print(f"| {i} | `{op['name']}` | {shapes} | {op['calls']} | {op['selfSeconds']:.3f} | "
              f"{op['selfSeconds'] / step_s:.1%} |")
    parts: dict[str, float] = {}
    for op in doc["operators"]:
        parts[part_of(op, vocab, rank=16)] = parts.get(part_of(op, vocab, rank=16), 0.0) + op["selfSeconds"]
    listed = sum(parts.values())
    parts["not in the listed operators"] = max(0.0, doc["recordedSelfSeconds"] - listed)
    print("\n| part | self s | share of step |\n|---|---|---|")
    for part, s in sorted(parts.items(), key=lambda kv: -kv[1]):
        print(f"| {part} | {s:.3f} | {s / step_s:.1%} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
