#!/usr/bin/env python3
"""LoRA SFT side by side: the native engine (trainer-job run) and TRL's SFTTrainer + PEFT, in one
run, on this CPU, with the same random Qwen3-architecture model, data, batch, sequence length,
steps and threads. Prints tokens/s of each and their ratio, peak memory of each, and the time
from process start to the first optimizer step. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/engine/bench_sft.py [--steps 30] [--layers 4]

Both engines: fp32, batch 4 rows padded to the longest, no packing, no gradient checkpointing,
LoRA r=16 alpha=32 dropout 0 on q/k/v/o/gate/up/down, AdamW lr 1e-4 linear, loss on the
completion only. Tokens/s counts non-padding tokens over the steps after the first `--skip`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import resource
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))

TRL_SCRIPT = r'''
import json, os, sys, time
T0 = float(sys.argv[1])
import torch
torch.set_num_threads(int(sys.argv[5]))
from datasets import load_dataset
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import SFTConfig, SFTTrainer

model_dir, data, steps, out = sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[6]

def emit(obj):
    obj["t"] = time.time() - T0
    print("BENCH " + json.dumps(obj), flush=True)

class Probe(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        emit({"type": "step", "step": state.global_step})
    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "num_tokens" in logs:
            emit({"type": "log", "step": state.global_step, "num_tokens": logs["num_tokens"], "loss": logs.get("loss")})
    def on_train_end(self, args, state, control, **kw):
        hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
        emit({"type": "end", "rss_peak_bytes": int(hwm) * 1024})

ds = load_dataset("json", data_files=data, split="train")
cfg = SFTConfig(output_dir=out, per_device_train_batch_size=4, gradient_accumulation_steps=1, max_steps=steps,
                learning_rate=1e-4, lr_scheduler_type="linear", warmup_steps=0, logging_steps=1, save_strategy="no",
                report_to=[], max_length=256, packing=False, use_cpu=True, bf16=False, fp16=False,
                dataloader_num_workers=0, seed=42, completion_only_loss=True, gradient_checkpointing=False,
                disable_tqdm=True, model_init_kwargs={"dtype": torch.float32})
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
trainer = SFTTrainer(model=model_dir, args=cfg, train_dataset=ds, peft_config=lora, callbacks=[Probe()],
                     processing_class=AutoTokenizer.from_pretrained(model_dir))
trainer.train()
'''


def make_data(path, rows, seed=0):
    """Prompt/completion rows of similar length (~150-230 tokens), so both engines' batches match."""
    import random

    rnd = random.Random(seed)
    words = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
             "upsilon phi chi psi omega river mountain forest ocean desert valley city village road bridge").split()
    with open(path, "w") as f:
        for _ in range(rows):
            prompt = "Summarize: " + " ".join(rnd.choice(words) for _ in range(rnd.randint(90, 120)))
            completion = " " + " ".join(rnd.choice(words) for _ in range(rnd.randint(40, 60)))
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def run_timed(cmd, env=None):
    """Starts cmd; returns (start time, [(arrival time, json line)], stderr, returncode)."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = []
    for line in proc.stdout:
        line = line.strip()
        if line.startswith("BENCH "):
            line = line[len("BENCH "):]
        if line.startswith("{"):
            try:
                lines.append((time.time() - t0, json.loads(line)))
            except json.JSONDecodeError:
                pass  # a library's own output
    err = proc.stderr.read()
    proc.wait()
    return t0, lines, err, proc.returncode


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--skip", type=int, default=5, help="steps left out of the throughput (warm-up)")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--work", default=None, help="folder for the model, data and outputs (default: a temp folder)")
    args = ap.parse_args()
    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    job = build / "apps" / "trainer-job"
    work = pathlib.Path(args.work or tempfile.mkdtemp(prefix="bench-sft-"))
    work.mkdir(parents=True, exist_ok=True)

    import models

    model_dir = work / "model"
    if not (model_dir / "config.json").exists():
        models.make_tiny_model(model_dir, arch="qwen3", tokenizer="qwen3", seed=0, hidden_size=args.hidden,
                               intermediate_size=3 * args.hidden, num_hidden_layers=args.layers,
                               num_attention_heads=8, num_key_value_heads=4, head_dim=args.hidden // 8)
    data = work / "train.jsonl"
    make_data(data, rows=4 * args.steps + 8)

    plan = {"kind": "run", "workload": "bench", "baseModel": str(model_dir),
            "config": {"dataset": str(data), "method": "sft",
                       "hyperparams": {"lora": {"rank": 16, "alpha": 32, "dropout": 0.0},
                                       "optimizer": {"learningRate": 1e-4, "schedule": "linear"},
                                       "training": {"maxSteps": args.steps, "batchSize": 4, "seed": 42}},
                       "maxSeqLength": 256, "model": {"precision": "FP32"}},
            "execution": {"gpus": 0}}
    (work / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))

    # --- ours
    _, lines, err, rc = run_timed([str(job), "run", "--plan", str(work / "plan.json"), "--output", str(work / "ours")], env)
    if rc != 0:
        sys.exit(f"trainer-job failed ({rc}):\n{err[-3000:]}")
    steps = [e for _, e in lines if e["type"] == "step"]
    first_step_ours = next(t for t, e in lines if e["type"] == "step")
    timed = steps[args.skip:]
    ours_tps = sum(e["batchTokens"] for e in timed) / sum(e["stepSeconds"] for e in timed)
    t_steps = [t for t, e in lines if e["type"] == "step"]
    ours_wall_tps = sum(e["batchTokens"] for e in timed) / (t_steps[-1] - t_steps[args.skip - 1])
    # The process's RSS high-water mark, as TRL's is measured (the job's own memory figures count
    # tensors, not the process): the first child waited for is ours.
    ours_peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024

    # --- TRL
    t0 = time.time()
    _, lines, err, rc = run_timed([sys.executable, "-c", TRL_SCRIPT, str(t0), str(model_dir), str(data), str(args.steps),
                                   str(args.threads), str(work / "trl")], env)
    if rc != 0:
        sys.exit(f"TRL failed ({rc}):\n{err[-3000:]}")
    trl_steps = [(e["t"], e) for _, e in lines if e["type"] == "step"]
    logs = {e["step"]: e["num_tokens"] for _, e in lines if e["type"] == "log"}
    first_step_trl = trl_steps[0][0]
    t_a, t_b = trl_steps[args.skip - 1][0], trl_steps[-1][0]
    trl_tokens = logs[args.steps] - logs[args.skip]
    trl_tps = trl_tokens / (t_b - t_a)
    trl_peak = next(e["rss_peak_bytes"] for _, e in lines if e["type"] == "end")

    print(f"model: Qwen3 architecture, {args.layers} layers, hidden {args.hidden}, vocab {json.loads((model_dir / 'config.json').read_text())['vocab_size']}; "
          f"batch 4, maxSeqLength 256, {args.steps} steps, {args.threads} threads, fp32, LoRA r16 on 7 modules")
    print(f"{'':28}{'native':>12}{'TRL+PEFT':>12}{'ratio':>8}")
    print(f"{'tokens/s (step phase)':28}{ours_tps:12.0f}{'':12}")
    print(f"{'tokens/s (wall, steps)':28}{ours_wall_tps:12.0f}{trl_tps:12.0f}{ours_wall_tps / trl_tps:8.2f}")
    print(f"{'peak RSS (MiB)':28}{ours_peak / 2**20:12.0f}{trl_peak / 2**20:12.0f}{trl_peak / ours_peak:8.2f}")
    print(f"{'start to first step (s)':28}{first_step_ours:12.2f}{first_step_trl:12.2f}{first_step_trl / first_step_ours:8.2f}")


if __name__ == "__main__":
    main()
