#!/usr/bin/env python3
"""Evaluation rows/s side by side, in one run on this machine: `trainer-job evaluate` (greedy
answers, batched with a key/value cache, graded by json-label-match) against the same
evaluation done with transformers + PEFT: `generate` in a loop, one row at a time, graded by the
same rule in Python, and also transformers batched (left-padded batches of --batch) as the
stronger baseline. Same random Qwen3-shaped model, LoRA adapter (made by PEFT), rows, chat
template, new tokens and threads; fp32. A random model never stops early, so every answer runs
to --new-tokens on both sides. Each side runs --rounds times, taking turns, and reports its best.
Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/eval/bench_evaluate.py [--rows 32] [--new-tokens 32]
        [--batch 8] [--layers 4] [--hidden 256] [--threads 2] [--rounds 2]
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


def label_match(answer: str, gold: str) -> float:
    """json-label-match on the bundled rows' shape (gold is a flat JSON object)."""
    want = json.loads(gold)
    start = answer.find("{")
    try:
        got = json.loads(answer[start:answer.rindex("}") + 1]) if start >= 0 else None
    except (ValueError, json.JSONDecodeError):
        got = None
    if not isinstance(got, dict):
        return 0.0
    return sum(got.get(k) == v for k, v in want.items()) / len(want)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=32)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    import peft
    import torch
    import transformers

    import models

    torch.set_num_threads(a.threads)
    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    job = build / "apps" / "trainer-job"
    if not job.exists():
        job = next(build.rglob("trainer-job"))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-eval-"))
    folder = models.make_tiny_model(tmp / "model", arch="qwen3", seed=0, hidden_size=a.hidden,
                                    intermediate_size=a.hidden * 3, num_hidden_layers=a.layers,
                                    num_attention_heads=max(2, a.hidden // 64),
                                    num_key_value_heads=max(1, a.hidden // 128), head_dim=64)
    base = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    torch.manual_seed(0)
    cfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, init_lora_weights=False, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = peft.get_peft_model(base, cfg).eval()
    model.save_pretrained(tmp / "adapter")
    topics = ["billing", "login", "refund", "shipping", "account", "delivery"]
    rows = [{"messages": [{"role": "system", "content": "Label the support ticket. Answer with JSON only."},
                          {"role": "user", "content": f"Ticket {i}: I have a problem with my {topics[i % 6]} "
                                                      f"since order {1000 + i * 37}; please help."},
                          {"role": "assistant", "content": json.dumps({"label": topics[i % 6],
                                                                       "urgent": i % 3 == 0})}]}
            for i in range(a.rows)]
    data = tmp / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    spec = tmp / "spec.json"
    spec.write_text(json.dumps({"baseModel": str(folder), "adapter": str(tmp / "adapter"), "dataset": str(data),
                                "maxNewTokens": a.new_tokens, "batchSize": a.batch}))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))

    def ours_round() -> dict:
        t0 = time.perf_counter()
        subprocess.run([str(job), "evaluate", "--spec", str(spec), "--output", str(tmp / "out")], check=True, env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wall = time.perf_counter() - t0
        report = json.loads((tmp / "out" / "report.json").read_text())
        return {"wall": wall, "loop": report["generationSeconds"] + report["gradingSeconds"], "report": report}

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    prompts = [tok.apply_chat_template(r["messages"][:-1], add_generation_prompt=True, tokenize=True, return_dict=False)
               for r in rows]
    golds = [r["messages"][-1]["content"] for r in rows]
    eos = [tok.eos_token_id]

    def hf_loop() -> float:
        t0 = time.perf_counter()
        scores = []
        with torch.no_grad():
            for p, gold in zip(prompts, golds):
                out = model.generate(input_ids=torch.tensor([p]), attention_mask=torch.ones(1, len(p), dtype=torch.long),
                                     max_new_tokens=a.new_tokens, do_sample=False, eos_token_id=eos,
                                     pad_token_id=tok.pad_token_id)
                scores.append(label_match(tok.decode(out[0, len(p):], skip_special_tokens=True), gold))
        return time.perf_counter() - t0

    def hf_batched() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            for b in range(0, len(prompts), a.batch):
                chunk = prompts[b:b + a.batch]
                width = max(len(p) for p in chunk)
                ids = torch.tensor([[tok.pad_token_id] * (width - len(p)) + p for p in chunk])
                mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in chunk])
                out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=a.new_tokens, do_sample=False,
                                     eos_token_id=eos, pad_token_id=tok.pad_token_id)
                for row, gold in zip(out, golds[b:b + a.batch]):
                    label_match(tok.decode(row[width:], skip_special_tokens=True), gold)
        return time.perf_counter() - t0

    hf_loop()  # warm-up
    ours_runs, loop_runs, batched_runs = [], [], []
    for _ in range(a.rounds):
        ours_runs.append(ours_round())
        loop_runs.append(hf_loop())
        batched_runs.append(hf_batched())
    best = min(ours_runs, key=lambda r: r["loop"])
    n = a.rows
    print(json.dumps({
        "model": f"qwen3 hidden={a.hidden} layers={a.layers} vocab=151k fp32, LoRA r16 on 7 projections",
        "rows": n, "new_tokens": a.new_tokens, "batch": a.batch, "threads": a.threads,
        "ours_rows_per_s": round(n / best["loop"], 2),
        "ours_rows_per_s_with_process_start_and_load": round(n / min(r["wall"] for r in ours_runs), 2),
        "hf_peft_loop_rows_per_s": round(n / min(loop_runs), 2),
        "hf_peft_batched_rows_per_s": round(n / min(batched_runs), 2),
        "ratio_vs_loop": round(min(loop_runs) / best["loop"], 2),
        "ratio_vs_batched": round(min(batched_runs) / best["loop"], 2),
        "ours_seconds_each_round": [round(r["loop"], 2) for r in ours_runs],
        "hf_loop_seconds_each_round": [round(x, 2) for x in loop_runs],
        "hf_batched_seconds_each_round": [round(x, 2) for x in batched_runs],
        "ours_generated_tokens": best["report"]["generatedTokens"],
        "load_average": round(os.getloadavg()[0], 2)}, indent=1))


if __name__ == "__main__":
    main()
