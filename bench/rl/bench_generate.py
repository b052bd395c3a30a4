#!/usr/bin/env python3
"""Generation tokens/s side by side, in one run on this machine: the native engine's sampler
(trainer-job's hidden debug-generate: batched, KV cache, prefill once per prompt) and
transformers' `generate`, on the same random Qwen3-architecture model, prompts, batch
(prompts x group size), new tokens and threads. Both fp32, sampling at temperature 1 with
top-p 1, no stop token (every completion runs to --new-tokens), timed after one warm-up run.
The two sides take turns --rounds times and each reports its best round, so a machine shared
with other work slows both alike and a passing burst of load does not decide the ratio.
Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/rl/bench_generate.py [--layers 4] [--hidden 256]
        [--prompts 4] [--group 8] [--new-tokens 64] [--threads 2] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompt-len", type=int, default=48)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    import torch

    import models

    torch.set_num_threads(a.threads)
    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    job = build / "apps" / "trainer-job" / "trainer-job"
    if not job.exists():
        job = next(build.rglob("trainer-job"))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-gen-"))
    folder = models.make_tiny_model(tmp / "model", arch="qwen3", seed=0, hidden_size=a.hidden,
                                    intermediate_size=a.hidden * 3, num_hidden_layers=a.layers,
                                    num_attention_heads=max(2, a.hidden // 64), num_key_value_heads=max(1, a.hidden // 128),
                                    head_dim=64)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(3, 10000, (a.prompt_len - (i % 3) * 4,), generator=g).tolist() for i in range(a.prompts)]
    n = a.prompts * a.group

    req = tmp / "req.json"
    req.write_text(json.dumps({"prompts": prompts, "maxNewTokens": a.new_tokens, "temperature": 1.0,
                               "groupSize": a.group, "seed": 1, "repeat": 2}))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

    def ours_round() -> dict:
        # One warm-up and one timed run inside the same process (repeat=2: the last is timed).
        subprocess.run([str(job), "debug-generate", "--model", str(folder), "--request", str(req), "--output",
                        str(tmp / "out.json")], check=True, env=env)
        return json.loads((tmp / "out.json").read_text())

    # transformers: the group as num_return_sequences, left-padded batch, same sampling settings.
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    model.generation_config.eos_token_id = None
    width = max(len(p) for p in prompts)
    ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=a.new_tokens, do_sample=True, temperature=1.0,
              top_p=1.0, top_k=0, num_return_sequences=a.group, pad_token_id=0)
    with torch.no_grad():
        model.generate(**kw)  # warm-up
    ours_runs, hf_runs = [], []
    for _ in range(a.rounds):
        ours_runs.append(ours_round())
        with torch.no_grad():
            t0 = time.perf_counter()
            out = model.generate(**kw)
            hf_runs.append(time.perf_counter() - t0)
    ours = min(ours_runs, key=lambda r: r["seconds"])
    hf_s = min(hf_runs)
    hf_tokens = int(out[:, width:].numel())
    hf_tps = hf_tokens / hf_s
    print(json.dumps({"model": f"qwen3 hidden={a.hidden} layers={a.layers} vocab=151k fp32",
                      "batch": f"{a.prompts} prompts x {a.group} = {n} completions, {a.new_tokens} new tokens",
                      "threads": a.threads,
                      "ours_tokens": ours["generatedTokens"], "ours_seconds": round(ours["seconds"], 3),
                      "ours_tokens_per_s": round(ours["tokensPerSecond"], 1),
                      "hf_tokens": hf_tokens, "hf_seconds": round(hf_s, 3), "hf_tokens_per_s": round(hf_tps, 1),
                      "ratio": round(ours["tokensPerSecond"] / hf_tps, 2),
                      "ours_seconds_each_round": [round(r["seconds"], 3) for r in ours_runs],
                      "hf_seconds_each_round": [round(x, 3) for x in hf_runs],
                      "load_average": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
