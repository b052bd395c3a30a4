#!/usr/bin/env python3
"""One turn of the TRL side of bench_grpo.py, in its own process: TRL's GRPOTrainer + PEFT on the
bench's model and prompts. Prints one `BENCH {json}` record at the end: each step's seconds, each
generation phase's seconds and tokens.

    peer_grpo.py MODEL DATA STEPS OUT THREADS NEW_TOKENS GROUP PROMPTS
"""
from __future__ import annotations

import json
import sys
import time

import torch

torch.set_num_threads(int(sys.argv[5]))
import datasets  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback  # noqa: E402
from trl import GRPOConfig, GRPOTrainer  # noqa: E402

model_dir, data, steps, out = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
new_tokens, group, prompts = int(sys.argv[6]), int(sys.argv[7]), int(sys.argv[8])
rows = [json.loads(line) for line in open(data)]
ds = datasets.Dataset.from_list([{"prompt": r["messages"][:-1], "gold": r["messages"][-1]["content"]} for r in rows])


def reward(completions, gold, **kw):
    return [1.0 if g in (c[0]["content"] if isinstance(c, list) else c) else 0.0 for c, g in zip(completions, gold)]


times = []


class Probe(TrainerCallback):
    def on_step_begin(self, *a, **k):
        times.append(time.perf_counter())

    def on_step_end(self, *a, **k):
        times[-1] = time.perf_counter() - times[-1]


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
    result = generate(prompts)
    gen_seconds.append(time.perf_counter() - t0)
    gen_tokens.append(sum(len(ids) for ids in result[1]))
    return result


tr._generate = timed_generate
tr.train()
print("BENCH " + json.dumps({"type": "grpo", "step_seconds": times, "generation_seconds": gen_seconds,
                             "generation_tokens": gen_tokens}), flush=True)
