#!/usr/bin/env python3
"""GRPO side by side on this machine: the native engine (`native`: trainer-job run, method grpo)
against TRL's GRPOTrainer + PEFT (`trl`), with the same random Qwen3-architecture model, prompts,
group size, completion length, steps, threads and json-label-match-style reward. Every turn of
every side is a fresh process, the sides alternate (bench/common/sides.py; default 3 pairs) and
each child's peak RSS comes from wait4. Prints seconds per step (the mean over the steps after
the first), each pair's ratio and the median, generation tokens/s and the generation share of a
step. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/rl/bench_grpo.py [--pairs 3] [--steps 4] [--layers 4]

Both: fp32, LoRA r=16 alpha=32 on q/k/v/o/gate/up/down, group 8, 4 prompts per step, 64 new
tokens (no stop: a random model rarely ends), temperature 1, beta 0, loss dapo, lr 1e-5.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import statistics
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import sides, workload  # noqa: E402

SIDES = ("native", "trl")


def after_first(xs: list) -> list:
    """The steps after the first (its warm-up), or the only one there is."""
    return xs[1:] or xs


def main() -> int:
    ap = argparse.ArgumentParser()
    sides.add_arguments(ap, SIDES, "native,trl")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    workload.work_argument(ap)
    a = ap.parse_args()
    chosen = sides.chosen(a, SIDES)
    shape = workload.rl_shape(a.hidden)
    with workload.work_folder(a.work, "bench-grpo-") as tmp:
        return run(a, chosen, shape, tmp)


def write_workload(tmp: pathlib.Path, hidden: int, layers: int, steps: int, group: int, prompts: int,
                   new_tokens: int) -> pathlib.Path:
    """The model, prompts and plan of this benchmark in tmp; returns the plan's path (bench/engine/profile_step.py
    runs it too)."""
    folder = workload.qwen3_model(tmp / "model", hidden, layers, **workload.rl_shape(hidden))
    labels = ["billing", "shipping", "refund", "account"]
    rows = [{"messages": [{"role": "user", "content": f"Classify ticket {i}: my {labels[i % 4]} issue, answer in JSON"},
                          {"role": "assistant", "content": json.dumps({"label": labels[i % 4]})}]} for i in range(64)]
    data = tmp / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = {"kind": "run", "workload": "bench", "baseModel": str(folder),
            "config": {"dataset": str(data), "method": "grpo", "maxSeqLength": 256, "model": {"precision": "FP32"},
                       "hyperparams": {"lora": {"rank": 16, "alpha": 32}, "training": {"maxSteps": steps, "seed": 42}},
                       "klBeta": 0.0, "rlHyperparams": {"groupSize": group, "promptsPerStep": prompts,
                                                        "maxCompletionLength": new_tokens,
                                                        "microBatchSize": group * prompts,
                                                        "optimizer": {"learningRate": 1e-5}}},
            "execution": {"gpus": 0}}
    (tmp / "plan.json").write_text(json.dumps(plan))
    return tmp / "plan.json"


def run(a, chosen: list[str], shape: dict, tmp: pathlib.Path) -> int:
    write_workload(tmp, a.hidden, a.layers, a.steps, a.group, a.prompts, a.new_tokens)
    folder = tmp / "model"
    data = tmp / "rl.jsonl"
    env = workload.thread_env(a.threads)
    print(f"model: qwen3 hidden {a.hidden}, {a.layers} layers, vocab 151k, fp32, LoRA r16; {a.prompts} prompts x "
          f"{a.group}, {a.new_tokens} new tokens, {a.steps} steps (first left out); {a.threads} threads")

    def turn(side: str, pair: int) -> sides.Figure:
        if side == "native":
            events = tmp / f"native-{pair}.events"
            child = sides.checked(sides.run_child([workload.trainer_job(), "run", "--plan", tmp / "plan.json",
                                                   "--output", tmp / f"native-{pair}", "--events", events], env),
                                  "trainer-job")
            steps = [e for e in map(json.loads, events.read_text().splitlines()) if e.get("type") == "step"]
            step_s = after_first([s["stepSeconds"] for s in steps])
            gen_s = after_first([s["rl"]["generationSeconds"] for s in steps])
            gen_tps = after_first([s["rl"]["generationTokensPerSecond"] for s in steps])
            allocated = max((s.get("memory") or {}).get("allocatedPeakBytes", 0) for s in steps)
            return sides.Figure(statistics.mean(step_s), child,
                                {"generation_share": sum(gen_s) / sum(step_s),
                                 "generation_tokens_per_s": statistics.mean(gen_tps),
                                 "allocated_peak_mib": allocated / 2**20})
        child = sides.checked(sides.run_child([sys.executable, HERE / "peer_grpo.py", folder, data, a.steps,
                                               tmp / f"trl-{pair}", a.threads, a.new_tokens, a.group, a.prompts], env),
                              "TRL GRPOTrainer")
        r = child.of_type("grpo")[-1]
        step_s, gen_s = after_first(r["step_seconds"]), after_first(r["generation_seconds"])
        return sides.Figure(statistics.mean(step_s), child,
                            {"generation_share": statistics.mean(gen_s) / statistics.mean(step_s),
                             "generation_tokens_per_s": sum(after_first(r["generation_tokens"])) / sum(gen_s)})

    turns = sides.alternate(chosen, a.pairs, turn, "s/step")
    sides.report(turns, "s/step", higher_is_better=False)
    for side in chosen:
        tps = sides.median_detail(turns, side, "generation_tokens_per_s")
        share = sides.median_detail(turns, side, "generation_share")
        allocated = sides.median_detail(turns, side, "allocated_peak_mib")
        print(f"{side}: generation {tps:.1f} tokens/s, {share:.2f} of a step"
              + (f"; torch's allocated peak {allocated:.0f} MiB" if allocated is not None else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
