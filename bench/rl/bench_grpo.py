#!/usr/bin/env python3
"""GRPO side by side on this machine: the native engine (trainer-job run, method grpo) and TRL's
GRPOTrainer + PEFT, with the same random Qwen3-architecture model, prompts, group size,
completion length, steps, threads and json-label-match-style reward. Prints seconds per step,
generation tokens/s, the generation share of a step and peak memory for each. Run by hand (not in CI):

    TRAINER_BUILD_DIR=build .venv/bin/python bench/rl/bench_grpo.py [--steps 4] [--layers 4]

Both: fp32, LoRA r=16 alpha=32 on q/k/v/o/gate/up/down, group 8, 4 prompts per step, 64 new
tokens (no stop: a random model rarely ends), temperature 1, beta 0, loss dapo, lr 1e-5.
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
import json, sys, time
import torch
torch.set_num_threads(int(sys.argv[5]))
import datasets
from peft import LoraConfig
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
from trl import GRPOConfig, GRPOTrainer
model_dir, data, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
new_tokens, group, prompts = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
rows = [json.loads(l) for l in open(data)]
ds = datasets.Dataset.from_list([{"prompt": r["messages"][:-1], "gold": r["messages"][-1]["content"]} for r in rows])
def reward(completions, gold, **kw):
    return [1.0 if g in (c[0]["content"] if isinstance(c, list) else c) else 0.0 for c, g in zip(completions, gold)]
times = []
class Probe(TrainerCallback):
    def on_step_begin(self, *a, **k): times.append(time.perf_counter())
    def on_step_end(self, *a, **k): times[-1] = time.perf_counter() - times[-1]
tok = AutoTokenizer.from_pretrained(model_dir)
model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
model.generation_config.eos_token_id = None
cfg = GRPOConfig(output_dir=out, use_cpu=True, bf16=False, report_to=[], per_device_train_batch_size=group * prompts,
                 num_generations=group, max_completion_length=new_tokens, max_steps=steps, learning_rate=1e-5,
                 beta=0.0, loss_type="dapo", temperature=1.0, logging_steps=1, save_strategy="no",
                 gradient_checkpointing=False, disable_tqdm=True, seed=42)
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
tr = GRPOTrainer(model=model, reward_funcs=[reward], args=cfg, train_dataset=ds, processing_class=tok,
                 peft_config=lora, callbacks=[Probe()])
gen_seconds, gen_tokens = [], []
generate = tr._generate
def timed_generate(prompts):  # TRL's whole generation phase of a step (tokenising, generate, decoding)
    t0 = time.perf_counter()
    out = generate(prompts)
    gen_seconds.append(time.perf_counter() - t0)
    gen_tokens.append(sum(len(ids) for ids in out[1]))
    return out
tr._generate = timed_generate
tr.train()
hwm = [l for l in open("/proc/self/status") if l.startswith("VmHWM")][0].split()[1]
print("BENCH " + json.dumps({"step_seconds": times, "generation_seconds": gen_seconds, "generation_tokens": gen_tokens,
                             "rss_peak_bytes": int(hwm) * 1024}))
'''


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--group", type=int, default=8)
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    import models

    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    job = next(build.rglob("trainer-job"))
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-grpo-"))
    folder = models.make_tiny_model(tmp / "model", arch="qwen3", seed=0, hidden_size=a.hidden,
                                    intermediate_size=a.hidden * 3, num_hidden_layers=a.layers,
                                    num_attention_heads=max(2, a.hidden // 64),
                                    num_key_value_heads=max(1, a.hidden // 128), head_dim=64)
    labels = ["billing", "shipping", "refund", "account"]
    rows = [{"messages": [{"role": "user", "content": f"Classify ticket {i}: my {labels[i % 4]} issue, answer in JSON"},
                          {"role": "assistant", "content": json.dumps({"label": labels[i % 4]})}]} for i in range(64)]
    data = tmp / "rl.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    plan = {"kind": "run", "workload": "bench", "baseModel": str(folder),
            "config": {"dataset": str(data), "method": "grpo", "maxSeqLength": 256, "model": {"precision": "FP32"},
                       "hyperparams": {"lora": {"rank": 16, "alpha": 32}, "training": {"maxSteps": a.steps, "seed": 42}},
                       "klBeta": 0.0, "rlHyperparams": {"groupSize": a.group, "promptsPerStep": a.prompts,
                                                        "maxCompletionLength": a.new_tokens, "microBatchSize": a.group * a.prompts,
                                                        "optimizer": {"learningRate": 1e-5}}},
            "execution": {"gpus": 0}}
    (tmp / "plan.json").write_text(json.dumps(plan))
    env = dict(os.environ, OMP_NUM_THREADS=str(a.threads))
    subprocess.run([str(job), "run", "--plan", str(tmp / "plan.json"), "--output", str(tmp / "ours"), "--events",
                    str(tmp / "ours.events")], check=True, env=env, capture_output=True)
    # Peak RSS of the finished trainer-job: the largest of the waited-for children so far (KiB on Linux).
    ours_rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    steps = [json.loads(l) for l in (tmp / "ours.events").read_text().splitlines() if '"type":"step"' in l.replace(" ", "")]
    ours_s = [s["stepSeconds"] for s in steps][1:] or [steps[0]["stepSeconds"]]
    ours_gen = [s["rl"]["generationSeconds"] for s in steps][1:] or [steps[0]["rl"]["generationSeconds"]]
    ours_tps = [s["rl"]["generationTokensPerSecond"] for s in steps][1:] or [steps[0]["rl"]["generationTokensPerSecond"]]
    ours_mem = max((s.get("memory") or {}).get("allocatedPeakBytes", 0) for s in steps)

    (tmp / "trl_grpo.py").write_text(TRL_SCRIPT)  # not trl.py: it would shadow the trl package
    p = subprocess.run([sys.executable, str(tmp / "trl_grpo.py"), str(folder), str(data), str(a.steps), str(tmp / "trl"),
                        str(a.threads), str(a.new_tokens), str(a.group), str(a.prompts)], capture_output=True, text=True,
                       env=env)
    line = [l for l in p.stdout.splitlines() if l.startswith("BENCH ")]
    if not line:
        raise SystemExit("TRL run failed:\n" + p.stderr[-3000:])
    trl = json.loads(line[-1][6:])
    trl_s = trl["step_seconds"][1:] or trl["step_seconds"]
    trl_gen = trl["generation_seconds"][1:] or trl["generation_seconds"]
    trl_tok = trl["generation_tokens"][1:] or trl["generation_tokens"]
    mean = lambda xs: sum(xs) / len(xs)
    print(json.dumps({"model": f"qwen3 hidden={a.hidden} layers={a.layers} vocab=151k fp32, LoRA r16",
                      "batch": f"{a.prompts} prompts x {a.group}, {a.new_tokens} new tokens, {a.steps} steps (first skipped)",
                      "ours_seconds_per_step": round(mean(ours_s), 3),
                      "ours_generation_share": round(mean(ours_gen) / mean(ours_s), 3),
                      "ours_generation_tokens_per_s": round(mean(ours_tps), 1),
                      "ours_allocated_peak_mb": round(ours_mem / 2**20, 1),
                      "ours_rss_peak_mb": round(ours_rss / 2**20, 1),
                      "trl_seconds_per_step": round(mean(trl_s), 3),
                      "trl_generation_share": round(mean(trl_gen) / mean(trl_s), 3),
                      "trl_generation_tokens_per_s": round(sum(trl_tok) / sum(trl_gen), 1),
                      "trl_rss_peak_mb": round(trl["rss_peak_bytes"] / 2**20, 1),
                      "steps_per_second_ratio": round(mean(trl_s) / mean(ours_s), 2)}, indent=1))


if __name__ == "__main__":
    main()
