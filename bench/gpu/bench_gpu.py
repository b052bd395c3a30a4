#!/usr/bin/env python3
"""The GPU check's measurements (bench/gpu/run builds trainer-job, then runs this).

For each model shape (random weights, Qwen3 architecture, the real Qwen3 vocabulary, bf16):
  parity:  the engine's first-step loss against transformers' loss on the same rows (one batch of
           them: LoRA B is zero at the start, so the first loss is the base model's; bf16 on the device);
  speed:   LoRA SFT (r 16 on q/k/v/o/gate/up/down, AdamW, batch 8 x ~512 tokens, no packing)
           with trainer-job and with a plain transformers + PEFT training loop on the same device:
           tokens/s over the steps after the warm-up, peak device memory, and MFU = 6 x linear
           parameters x tokens/s / the device's dense bf16 peak (the engine's own sft.mfu formula).
--device cpu is the smoke mode: tiny shapes, few steps, fp32 (bf16 on this CPU is slow), no MFU
(no CPU peak table).
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

# Qwen3 shapes (config.json of the released models), random weights.
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32),
}
# Dense bf16 peak FLOP/s by device name (as src/engine/device/peak_flops.cpp lists them).
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "L40S": 362e12}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def linear_parameters(c: dict, vocab: int) -> int:
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    h = c["hidden_size"]
    return c["num_hidden_layers"] * (h * q + 2 * h * kv + q * h + 3 * h * c["intermediate_size"]) + vocab * h


def make_rows(path: pathlib.Path, n: int, words_per_row: int, seed: int = 0) -> None:
    import random

    rnd = random.Random(seed)
    vocab = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
             "upsilon phi chi psi omega river mountain forest ocean desert valley city village road bridge").split()
    with open(path, "w") as f:
        for _ in range(n):
            prompt = "Summarize: " + " ".join(rnd.choice(vocab) for _ in range(words_per_row * 2 // 3))
            completion = " " + " ".join(rnd.choice(vocab) for _ in range(words_per_row // 3))
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def engine_run(job: str, work: pathlib.Path, model: pathlib.Path, data: pathlib.Path, steps: int, batch: int,
               device: str, seq: int) -> list[dict]:
    plan = {"kind": "run", "workload": "gpu-check", "baseModel": str(model),
            "config": {"dataset": str(data), "method": "sft",
                       "hyperparams": {"lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
                                       "optimizer": {"learningRate": 1e-4, "schedule": "linear"},
                                       "training": {"maxSteps": steps, "batchSize": batch, "seed": 42}},
                       "maxSeqLength": seq, "model": {"precision": "BF16" if device == "cuda" else "FP32"}},
            "execution": {"gpus": 1 if device == "cuda" else 0}}
    (work / "plan.json").write_text(json.dumps(plan))
    events = work / "events.jsonl"
    out = subprocess.run([job, "run", "--plan", str(work / "plan.json"), "--output", str(work / "out"),
                          "--events", str(events)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"trainer-job failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


def hf_run(model_dir: pathlib.Path, data: pathlib.Path, steps: int, batch: int, device: str, seq: int):
    """A plain transformers + PEFT loop: the engine's batches (rows in file order, right-padded),
    loss on the completion tokens, AdamW on the LoRA weights. Returns (first loss, [(t, tokens)], peak bytes)."""
    import torch
    import peft
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model_dir)
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype).to(device)
    model = peft.get_peft_model(model, peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0,
                                                       target_modules=TARGETS, task_type="CAUSAL_LM"))
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)
    rows = [json.loads(line) for line in data.read_text().splitlines()]
    encoded = []
    for r in rows:
        p = tok(r["prompt"])["input_ids"]
        ids = tok(r["prompt"] + r["completion"] + (tok.eos_token or ""))["input_ids"][:seq]
        labels = [-100] * min(len(p), len(ids)) + ids[len(p):]
        encoded.append((ids, labels))
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    marks, first = [], None
    for step in range(steps):
        chunk = [encoded[(step * batch + i) % len(encoded)] for i in range(batch)]
        width = max(len(ids) for ids, _ in chunk)
        pad = tok.pad_token_id if tok.pad_token_id is not None else 0
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in chunk], device=device)
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in chunk], device=device)
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in chunk], device=device)
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if first is None:
            first = loss.item()
        if device == "cuda":
            torch.cuda.synchronize()
        marks.append((time.time(), int(mask.sum().item())))
    peak = torch.cuda.max_memory_allocated() if device == "cuda" else 0
    return first, marks, peak


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--job", required=True)
    ap.add_argument("--shapes", default=None, help="comma-separated (default: qwen3-0.6b,qwen3-4b; cpu: tiny)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of tokens/s")
    args = ap.parse_args()
    import models
    import torch

    cpu = args.device == "cpu"
    shapes = (args.shapes or ("tiny" if cpu else "qwen3-0.6b,qwen3-4b")).split(",")
    steps = args.steps or (6 if cpu else 20)
    batch, words, seq = (4, 60, 128) if cpu else (8, 380, 512)
    peak_flops = None
    name = "cpu"
    if not cpu:
        name = torch.cuda.get_device_name(0)
        peak_flops = next((v for k, v in PEAKS.items() if k in name), None)
    work_root = pathlib.Path(tempfile.mkdtemp(prefix="gpu-check-"))
    results, ok = [], True
    for shape in shapes:
        work = work_root / shape
        work.mkdir(parents=True)
        cfg = SHAPES[shape]
        model_dir = models.make_tiny_model(work / "model", arch="qwen3", tokenizer="qwen3", seed=0,
                                           dtype="float32" if cpu else "bfloat16", **cfg)
        vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
        n_lin = linear_parameters(cfg, vocab)
        print(f"[{shape}] model written; parity step", file=sys.stderr, flush=True)
        # Parity: one step over exactly one batch of rows (whatever order the engine takes them in).
        pwork = work / "parity"
        pwork.mkdir()
        pdata = pwork / "rows.jsonl"
        make_rows(pdata, batch, words, seed=1)
        ours_first = next(e for e in engine_run(args.job, pwork, model_dir, pdata, 1, batch, args.device, seq)
                          if e.get("type") == "step")["loss"]
        hf_first, _, _ = hf_run(model_dir, pdata, 1, batch, args.device, seq)
        print(f"[{shape}] parity: engine {ours_first:.4f}, transformers {hf_first:.4f}; speed runs", file=sys.stderr,
              flush=True)
        data = work / "train.jsonl"
        make_rows(data, batch * steps, words)
        t = time.time()
        events = engine_run(args.job, work, model_dir, data, steps, batch, args.device, seq)
        engine_wall = time.time() - t
        step_events = [e for e in events if e.get("type") == "step"]
        timed = step_events[args.skip:]
        ours_tps = sum(e["batchTokens"] for e in timed) / max(1e-9, sum(e["stepSeconds"] for e in timed))
        ours_peak = max((e.get("memory", {}).get("allocatedPeakBytes", 0) for e in step_events), default=0)
        _, marks, hf_peak = hf_run(model_dir, data, steps, batch, args.device, seq)
        span = marks[-1][0] - marks[args.skip - 1][0]
        hf_tps = sum(n for _, n in marks[args.skip:]) / max(1e-9, span)
        rel = abs(ours_first - hf_first) / max(1e-9, abs(hf_first))
        parity = rel < 2e-2
        ok = ok and parity
        mfu = (lambda tps: 6 * n_lin * tps / peak_flops if peak_flops else None)
        results.append(dict(shape=shape, linear_params=n_lin, loss_engine=ours_first, loss_hf=hf_first,
                            loss_rel_diff=rel, parity=parity, tps_engine=ours_tps, tps_hf=hf_tps,
                            peak_engine=ours_peak, peak_hf=hf_peak, mfu_engine=mfu(ours_tps), mfu_hf=mfu(hf_tps),
                            engine_wall_s=engine_wall))
        del marks
    print(f"device: {name}; {'fp32' if cpu else 'bf16'}; batch {batch} rows of ~{words * 4 // 3} tokens (max {seq}); {steps} steps, "
          f"the first {args.skip} left out; LoRA r16 on 7 modules")
    fmt = lambda v, f: format("n/a", ">" + f.split(".")[0] + "s") if v is None else format(v, f)  # noqa: E731
    head = f"{'shape':12}{'loss eng':>10}{'loss hf':>10}{'rel':>9}{'tok/s eng':>11}{'tok/s hf':>10}" \
           f"{'mem eng GiB':>12}{'mem hf GiB':>11}{'MFU eng':>9}{'MFU hf':>8}"
    print(head)
    for r in results:
        print(f"{r['shape']:12}{r['loss_engine']:10.4f}{r['loss_hf']:10.4f}{r['loss_rel_diff']:9.1e}"
              f"{r['tps_engine']:11.0f}{r['tps_hf']:10.0f}{r['peak_engine'] / 2**30:12.2f}{r['peak_hf'] / 2**30:11.2f}"
              f"{fmt(r['mfu_engine'], '9.1%')}{fmt(r['mfu_hf'], '8.1%')}")
    print("JSON " + json.dumps(results))
    if not ok:
        print("parity: the engine's first loss differs from transformers' by more than 2%", file=sys.stderr)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
