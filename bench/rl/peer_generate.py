#!/usr/bin/env python3
"""One turn of a transformers side of bench_generate.py, in its own process: `generate` on the
bench's model and prompts, one warm-up call then one timed call, sampling as the native side
samples (temperature 1, top-p 1, no top-k, no stop token). Prints `BENCH {json}` with the timed
call's seconds and generated tokens.

    peer_generate.py CACHE MODEL REQUEST THREADS
CACHE: `static` (cache_implementation="static": preallocated key/value tensors, what a user
       after speed sets) or `dynamic` (transformers' default cache).
REQUEST: the native side's request JSON (prompts, groupSize, maxNewTokens, seed).
"""
from __future__ import annotations

import json
import sys
import time

CACHE, MODEL, REQUEST, THREADS = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
if CACHE not in ("static", "dynamic"):
    raise SystemExit(f"cache must be static or dynamic, not {CACHE!r}")

import torch  # noqa: E402
import transformers  # noqa: E402

torch.set_num_threads(THREADS)
req = json.loads(open(REQUEST).read())
prompts, group, new_tokens = req["prompts"], req["groupSize"], req["maxNewTokens"]
model = transformers.AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32).eval()
model.generation_config.eos_token_id = None
width = max(len(p) for p in prompts)
ids = torch.tensor([[0] * (width - len(p)) + p for p in prompts])  # left-padded
mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
kw = dict(input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, do_sample=True, temperature=1.0,
          top_p=1.0, top_k=0, num_return_sequences=group, pad_token_id=0)
if CACHE == "static":
    kw["cache_implementation"] = "static"
torch.manual_seed(req.get("seed", 1))
with torch.no_grad():
    model.generate(**kw)  # warm-up
    t0 = time.perf_counter()
    out = model.generate(**kw)
    seconds = time.perf_counter() - t0
print("BENCH " + json.dumps({"type": "generate", "seconds": seconds, "tokens": int(out[:, width:].numel())}),
      flush=True)
