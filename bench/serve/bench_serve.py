#!/usr/bin/env python3
"""Serving side by side on this machine: `trainer-job serve` (ours), transformers' `generate`
behind a minimal batching server (hf_server.py) and vLLM's CPU build (OpenAI API server), on the
same random Qwen3-shaped model (fp32), the same 4 PEFT LoRA adapters (r16 on the 7 projections,
random nonzero B), the same chat prompts (fixed token length) and the same output length
(greedy, `ignore_eos`: every request generates exactly --max-tokens tokens).

Per side and configuration (1 adapter / a mix of 4 adapters x concurrency 1, 8, 32): output
tokens/s and requests/s over the wall time, time to first token and inter-token latency p50/p99,
measured by one streaming client (client.py). Before timing, greedy text is compared across the
sides. The sides take turns (ours, hf, vllm; again each round); each is started for its turn and
stopped after it, so an idle server never competes with the measured one; figures are the
medians over rounds. Writes a JSON file and prints a markdown table. Usage: bench/serve/run -h.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import pathlib
import platform
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parents[1]
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(HERE))

import client  # noqa: E402
import sides  # noqa: E402

METRICS = ("output_tokens_per_s", "requests_per_s", "ttft_p50_ms", "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms")
MIXES = {"1 adapter": 1, "4 adapters": 4}


def make_models(root, a):
    """The base model and adapters a1..a4 (PEFT, r16, 7 projections, random nonzero B)."""
    import warnings

    import peft
    import torch
    import transformers

    import models

    warnings.filterwarnings("ignore", category=FutureWarning)

    base = models.make_tiny_model(root / "qwen3-tiny", arch="qwen3", seed=3, hidden_size=a.hidden,
                                  intermediate_size=a.hidden * 3, num_hidden_layers=a.layers,
                                  num_attention_heads=max(2, a.hidden // 64), num_key_value_heads=max(1, a.hidden // 128),
                                  head_dim=64, tie_word_embeddings=False, initializer_range=0.3,
                                  max_position_embeddings=a.max_len)
    model = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    params = sum(p.numel() for p in model.parameters())
    adapters = {}
    for i in range(4):
        m = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        torch.manual_seed(100 + i)
        cfg = peft.LoraConfig(r=a.rank, lora_alpha=2 * a.rank, lora_dropout=0.0, init_lora_weights=False,
                              task_type="CAUSAL_LM", target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                                                                     "gate_proj", "up_proj", "down_proj"])
        # init_lora_weights=False draws B at random too; scale it down so adapters nudge the model.
        pm = peft.get_peft_model(m, cfg)
        with torch.no_grad():
            for name, p in pm.named_parameters():
                if "lora_B" in name:
                    p.mul_(0.1)
        pm.save_pretrained(root / f"a{i + 1}")
        adapters[f"a{i + 1}"] = str(root / f"a{i + 1}")
    return str(base), adapters, params


def make_prompts(model_dir, n, length, seed=7):
    """n user messages of exactly `length` tokens each (random ordinary words)."""
    import random

    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    words = [w[1:] for w, i in tok.get_vocab().items() if w.startswith("\u0120") and w[1:].isalpha()
             and w[1:].islower() and len(w) >= 4 and i < 100000]
    words.sort()
    rng = random.Random(seed)
    out = []
    while len(out) < n:
        text = rng.choice(words).capitalize()
        while len(tok.encode(text, add_special_tokens=False)) < length:
            text += " " + rng.choice(words)
        if len(tok.encode(text, add_special_tokens=False)) == length:
            out.append(text)
    return out


def bodies_for(prompts, n, mix, a, offset=0):
    names = [f"a{i % mix + 1}" for i in range(n)]
    return [{"model": names[i], "messages": [{"role": "user", "content": prompts[(offset + i) % len(prompts)]}],
             "max_tokens": a.max_tokens, "temperature": 0, "ignore_eos": True} for i in range(n)]


def parity_texts(run, prompts, a):
    """Greedy texts for the parity prompts, base and a1, one request at a time."""
    out = {}
    for model in ("base", "a1"):
        bodies = [{"model": model, "messages": [{"role": "user", "content": p}], "max_tokens": a.parity_tokens,
                   "temperature": 0, "ignore_eos": True} for p in prompts[: a.parity_prompts]]
        results, _ = asyncio.run(client.run_load("127.0.0.1", run.port, bodies, 1))
        out[model] = [{"text": r.text, "prompt_tokens": r.prompt_tokens, "tokens": r.tokens, "error": r.error}
                      for r in results]
    return out


def measure_side(run, prompts, a):
    """Warm-up, then every configuration once; {mix: {concurrency: summary}}."""
    # Warm-up at every concurrency (batch shapes, allocator, oneDNN caches), 16 tokens a request:
    # a fresh transformers process is several times slower on its first batches.
    for c in a.concurrency:
        warm = bodies_for(prompts, max(2, c), 4, a)
        asyncio.run(client.run_load("127.0.0.1", run.port, [dict(b, max_tokens=16) for b in warm], c))
    out = {}
    for mix_name, mix in MIXES.items():
        out[mix_name] = {}
        for c in a.concurrency:
            n = max(a.min_requests, c * a.waves)
            res, wall = asyncio.run(client.run_load("127.0.0.1", run.port, bodies_for(prompts, n, mix, a, offset=c), c))
            s = client.summarize(res, wall)
            s["load_average"] = round(os.getloadavg()[0], 2)
            # ignore_eos on every side: each finished request counts exactly max_tokens (its usage).
            s["tokens_as_asked"] = s["output_tokens"] == (n - s["errors"]) * a.max_tokens
            out[mix_name][str(c)] = s
            print(f"  {run.side:5s} {mix_name:10s} c={c:<3d} {s['output_tokens_per_s']:8.1f} tok/s "
                  f"{s['requests_per_s']:6.2f} req/s ttft p50 {s['ttft_p50_ms']} ms itl p50 {s['itl_p50_ms']} ms"
                  f"{'' if s['tokens_as_asked'] else '  OUTPUT TOKENS OFF: ' + str(s['output_tokens'])}"
                  f"{'  ERRORS ' + str(s['errors']) + ': ' + str(s['first_error']) if s['errors'] else ''}",
                  file=sys.stderr, flush=True)
    return out


def compare_parity(texts):
    """{model: {prompt i: equal across sides}} plus the sides' first differing character."""
    report = {"equal": True, "details": []}
    names = list(texts)
    if len(names) < 2:
        return report
    for model in texts[names[0]]:
        for i, ref in enumerate(texts[names[0]][model]):
            row = {"model": model, "prompt": i, "prompt_tokens": {s: texts[s][model][i]["prompt_tokens"] for s in names}}
            for s in names[1:]:
                other = texts[s][model][i]["text"]
                same = other == ref["text"] and not texts[s][model][i]["error"]
                row[f"{s}_equals_{names[0]}"] = same
                if not same:
                    report["equal"] = False
                    k = next((j for j, (x, y) in enumerate(zip(ref["text"], other)) if x != y), min(len(ref["text"]), len(other)))
                    row[f"{s}_differs_at_char"] = k
                    row[f"{s}_text"] = other[:120]
                    row[f"{names[0]}_text"] = ref["text"][:120]
            report["details"].append(row)
    return report


def medians(rounds_by_side):
    med = {}
    for side, rounds in rounds_by_side.items():
        med[side] = {}
        for mix in MIXES:
            med[side][mix] = {}
            for c in rounds[0][mix]:
                vals = {m: [r[mix][c][m] for r in rounds if r[mix][c][m] is not None] for m in METRICS}
                med[side][mix][c] = {m: (round(statistics.median(v), 2) if v else None) for m, v in vals.items()}
                med[side][mix][c]["errors"] = sum(r[mix][c]["errors"] for r in rounds)
                med[side][mix][c]["tokens_as_asked"] = all(r[mix][c].get("tokens_as_asked", True) for r in rounds)
    return med


def markdown(med, parity, meta):
    lines = [f"Model: {meta['model']}; prompts {meta['prompt_tokens']} tokens (user message, chat-templated), "
             f"{meta['max_tokens']} output tokens each (greedy, ignore_eos); {meta['threads']} threads per side; "
             f"{meta['rounds']} round(s), medians; load average {meta['load_before']} before, {meta['load_after']} after.",
             f"Greedy fp32 text equal across sides ({meta['parity_prompts']} prompts x base and a1, "
             f"{meta['parity_tokens']} tokens): **{'yes' if parity['equal'] else 'NO'}**", "",
             "| adapters | concurrency | side | output tok/s | req/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | ITL p99 ms |",
             "|---|---|---|---|---|---|---|---|---|"]
    for mix in MIXES:
        for c in meta["concurrency"]:
            for side in med:
                m = med[side][mix][str(c)]
                err = (f" ({m['errors']} errors)" if m["errors"] else "") + ("" if m["tokens_as_asked"] else " (output tokens off)")
                lines.append(f"| {mix} | {c} | {sides.LABELS[side]}{err} | " + " | ".join(
                    "-" if m[k] is None else f"{m[k]:g}" for k in METRICS) + " |")
    if "ours" in med and len(med) > 1:
        peers = [s for s in med if s != "ours"]
        top = str(max(meta["concurrency"]))
        best = max(peers, key=lambda s: med[s]["4 adapters"][top]["output_tokens_per_s"] or 0)
        ours_t = med["ours"]["4 adapters"][top]["output_tokens_per_s"]
        peer_t = med[best]["4 adapters"][top]["output_tokens_per_s"]
        lines += ["", f"Output tokens/s at concurrency {top}, 4 adapters: ours / {sides.LABELS[best]} = "
                  f"{ours_t / peer_t:.2f}x (goal: at least 2x)" if peer_t else ""]
        low = str(min(meta["concurrency"]))
        for mix in MIXES:
            ttft = {s: med[s][mix][low]["ttft_p50_ms"] for s in med}
            lines.append(f"TTFT p50 at concurrency {low}, {mix}: " + ", ".join(f"{sides.LABELS[s]} {v} ms" for s, v in ttft.items()))
    return "\n".join(lines)


def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one round, fewer requests, fewer parity prompts")
    ap.add_argument("--sides", default="ours,hf,vllm")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", default="1,8,32")
    ap.add_argument("--waves", type=int, default=3, help="requests per configuration: concurrency x waves ...")
    ap.add_argument("--min-requests", type=int, default=8, help="... but at least this many")
    ap.add_argument("--prompt-tokens", type=int, default=64)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--parity-prompts", type=int, default=4)
    ap.add_argument("--parity-tokens", type=int, default=32)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--max-len", type=int, default=1024)
    ap.add_argument("--job", default=None, help="trainer-job (default $TRAINER_BUILD_DIR/apps/trainer-job)")
    ap.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    ap.add_argument("--out", default=None, help="results JSON (default bench-serve-results.json in the work folder)")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.waves, a.min_requests, a.parity_prompts = 1, 1, 4, 2
    a.concurrency = [int(c) for c in a.concurrency.split(",")]
    a.sides = [s for s in a.sides.split(",") if s]
    if a.job is None:
        build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
        a.job = str(next((p for p in (build / "apps" / "trainer-job", build / "apps" / "trainer-job" / "trainer-job")
                          if p.is_file()), build / "apps" / "trainer-job"))
    return a


def main():
    a = parse_args()
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if "vllm" in a.sides and not pathlib.Path(a.vllm_python).exists():
        sys.exit(f"{a.vllm_python} missing: run bench/serve/setup-vllm (or pass --sides ours,hf)")
    work = pathlib.Path(tempfile.mkdtemp(prefix="bench-serve-"))
    t_start = time.time()
    base, adapters, params = make_models(work, a)
    prompts = make_prompts(base, max(a.min_requests, max(a.concurrency) * a.waves) + max(a.concurrency), a.prompt_tokens)
    cfg = dict(job=a.job, model=base, adapters=adapters, threads=a.threads, max_len=a.max_len, max_batch=32,
               rank=a.rank, vllm_python=a.vllm_python, logs=str(work))
    meta = {"model": f"Qwen3 shape, hidden {a.hidden}, {a.layers} layers, untied head, vocab 151k, "
                     f"{params / 1e6:.0f} M parameters, fp32; LoRA r{a.rank} x 7 projections",
            "prompt_tokens": a.prompt_tokens, "max_tokens": a.max_tokens, "threads": a.threads, "rounds": a.rounds,
            "concurrency": a.concurrency, "parity_prompts": a.parity_prompts, "parity_tokens": a.parity_tokens,
            "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
            "load_before": round(os.getloadavg()[0], 2), "work": str(work), "sides": a.sides}
    print(f"bench-serve: models and logs in {work}", file=sys.stderr, flush=True)
    rounds_by_side = {s: [] for s in a.sides}
    texts, starts = {}, {s: [] for s in a.sides}
    for rnd in range(a.rounds):
        for side in a.sides:
            print(f"round {rnd + 1}/{a.rounds}: starting {side}", file=sys.stderr, flush=True)
            run = sides.start(side, cfg)
            starts[side].append(run.started_s)
            try:
                if rnd == 0:
                    texts[side] = parity_texts(run, prompts, a)
                rounds_by_side[side].append(measure_side(run, prompts, a))
            finally:
                sides.stop(run)
    parity = compare_parity(texts)
    med = medians(rounds_by_side)
    meta["load_after"] = round(os.getloadavg()[0], 2)
    meta["seconds"] = round(time.time() - t_start)
    meta["start_seconds"] = starts
    table = markdown(med, parity, meta)
    out = pathlib.Path(a.out or work / "bench-serve-results.json")
    out.write_text(json.dumps({"meta": meta, "parity": parity, "medians": med, "rounds": rounds_by_side,
                               "texts": texts, "markdown": table}, indent=1))
    print(table)
    print(f"\nresults: {out} ({meta['seconds']} s)")


if __name__ == "__main__":
    main()
