#!/usr/bin/env python3
"""Generation tokens/s side by side on this machine: the native engine's sampler (trainer-job's
hidden debug-generate: batched, KV cache, prefill once per prompt) against transformers'
`generate` with its static cache (`hf-static`, what a user after speed sets) and, if chosen, with
its default dynamic cache (`hf`). Same random Qwen3-architecture model, prompts, batch (prompts x
group size), new tokens and threads; fp32, sampling at temperature 1 with top-p 1, no stop token
(every completion runs to --new-tokens); each turn is a fresh process that makes one warm-up and
one timed call. The sides alternate (bench/common/sides.py) and each child's peak RSS comes from
wait4. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/rl/bench_generate.py [--prompts 4 --group 8]
        [--sides native,hf-static] [--pairs 3] [--layers 4] [--hidden 256] [--new-tokens 64] [--threads 2]

Scenarios (README.md): one sequence (--prompts 1 --group 1) and 32 sequences (--prompts 4 --group 8).
"""
from __future__ import annotations

import argparse
import json
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

from common import sides, workload  # noqa: E402

SIDES = ("native", "hf-static", "hf")


def main() -> int:
    ap = argparse.ArgumentParser()
    sides.add_arguments(ap, SIDES, "native,hf-static")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    workload.work_argument(ap)
    a = ap.parse_args()
    chosen = sides.chosen(a, SIDES)
    shape = workload.rl_shape(a.hidden)
    if a.prompt_len < 9:
        raise SystemExit(f"--prompt-len must be at least 9 (prompts are --prompt-len - 0, 4 or 8 long), not {a.prompt_len}")
    with workload.work_folder(a.work, "bench-gen-") as tmp:
        return run(a, chosen, shape, tmp)


def run(a, chosen: list[str], shape: dict, tmp: pathlib.Path) -> int:
    import torch

    folder = workload.qwen3_model(tmp / "model", a.hidden, a.layers, **shape)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 10000, (a.prompt_len - (i % 3) * 4,), generator=g).tolist() for i in range(a.prompts)]
    req = tmp / "req.json"
    # repeat 2: the native side's warm-up and timed run in one process (the last is timed), as the peers do.
    req.write_text(json.dumps({"prompts": prompts, "maxNewTokens": a.new_tokens, "temperature": 1.0,
                               "groupSize": a.group, "seed": 1, "repeat": 2}))
    env = workload.thread_env(a.threads)
    print(f"model: qwen3 hidden {a.hidden}, {a.layers} layers, vocab 151k, fp32; {a.prompts} prompts x {a.group} = "
          f"{a.prompts * a.group} sequences, {a.new_tokens} new tokens; {a.threads} threads")

    def turn(side: str, pair: int) -> sides.Figure:
        if side == "native":
            out = tmp / f"native-{pair}.json"
            child = sides.checked(sides.run_child([workload.trainer_job(), "debug-generate", "--model", folder,
                                                   "--request", req, "--output", out], env), "trainer-job")
            r = json.loads(out.read_text())
            return sides.Figure(r["generatedTokens"] / r["seconds"], child,
                                {"seconds": r["seconds"], "tokens": r["generatedTokens"]})
        cache = "static" if side == "hf-static" else "dynamic"
        child = sides.checked(sides.run_child([sys.executable, HERE / "peer_generate.py", cache, folder, req,
                                               a.threads], env), side)
        r = child.of_type("generate")[-1]
        return sides.Figure(r["tokens"] / r["seconds"], child, {"seconds": r["seconds"], "tokens": r["tokens"]})

    turns = sides.alternate(chosen, a.pairs, turn, "tokens/s")
    sides.report(turns, "tokens/s")
    for side in chosen:
        tokens = {t.figure.detail["tokens"] for t in turns if t.side == side}
        print(f"{side}: {sorted(tokens)} tokens per timed call; seconds per turn "
              + " ".join(f"{t.figure.detail['seconds']:.3f}" for t in turns if t.side == side))
    return 0


if __name__ == "__main__":
    sys.exit(main())
