#!/usr/bin/env python3
"""One turn of a TRL side of bench_sft.py, in its own process: TRL's SFTTrainer + PEFT on the
bench's model and data. Prints `BENCH {json}` records: `step` (a timestamp per optimizer step),
`log` (TRL's running non-padding token count), `first_loss` (the first step's loss at full
precision) and `end`.

Sides:
  trl          SFTTrainer as it comes (on the CPU its fused head scores every position and also
               computes entropy and top-1 accuracy over the whole vocabulary);
  trl-compact  the head compacted: the decoder to hidden states, the head and the cross-entropy
               only at the positions whose shifted label is not -100, normalised as TRL normalises;
  trl-compile  trl-compact with the decoder under torch.compile (dynamic shapes).
All three: unpacked rows padded to the longest of the batch, as the native engine trains them.

    peer_sft.py SIDE T0 MODEL DATA STEPS THREADS OUT
"""
from __future__ import annotations

import json
import sys
import time

SIDE, T0 = sys.argv[1], float(sys.argv[2])
MODEL, DATA, STEPS, THREADS, OUT = sys.argv[3], sys.argv[4], int(sys.argv[5]), int(sys.argv[6]), sys.argv[7]
SIDES = ("trl", "trl-compact", "trl-compile")
if SIDE not in SIDES:
    raise SystemExit(f"side must be one of {SIDES}, not {SIDE!r}")

import torch  # noqa: E402

torch.set_num_threads(THREADS)
from datasets import load_dataset  # noqa: E402
from peft import LoraConfig  # noqa: E402
from transformers import AutoTokenizer, TrainerCallback  # noqa: E402
from trl import SFTConfig, SFTTrainer  # noqa: E402


def emit(obj: dict) -> None:
    obj["t"] = time.time() - T0
    print("BENCH " + json.dumps(obj), flush=True)


class Probe(TrainerCallback):
    def on_step_end(self, args, state, control, **kw):
        emit({"type": "step", "step": state.global_step})

    def on_log(self, args, state, control, logs=None, **kw):
        if logs and "num_tokens" in logs:
            emit({"type": "log", "step": state.global_step, "num_tokens": logs["num_tokens"]})


class BenchTrainer(SFTTrainer):
    """SFTTrainer that reports its first loss unrounded and, when compact, scores the head only
    where there are labels."""

    def __init__(self, *a, compact: bool, compile_backbone: bool, **kw):
        super().__init__(*a, **kw)
        self.compact, self.compile_backbone = compact, compile_backbone
        self.backbone, self.first_loss_sent = None, False

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if self.compact and not return_outputs:
            loss = self.compact_loss(inputs, num_items_in_batch)
        else:
            loss = super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
        if not self.first_loss_sent:
            self.first_loss_sent = True
            emit({"type": "first_loss", "loss": float((loss[0] if isinstance(loss, tuple) else loss).detach())})
        return loss

    def compact_loss(self, inputs, num_items_in_batch):
        base = self.model.get_base_model()
        if self.backbone is None:
            self.backbone = torch.compile(base.model, dynamic=True) if self.compile_backbone else base.model
        kw = {k: inputs[k] for k in ("input_ids", "attention_mask", "position_ids") if k in inputs}
        hidden = self.backbone(**kw, use_cache=False).last_hidden_state
        labels = inputs["labels"][:, 1:]
        keep = labels != -100
        logits = base.lm_head(hidden[:, :-1][keep])
        count = keep.sum() if num_items_in_batch is None else num_items_in_batch
        loss = torch.nn.functional.cross_entropy(logits.float(), labels[keep], reduction="sum")
        loss = loss / torch.as_tensor(count).clamp(min=1)
        # The non-padding token count TRL logs (SFTTrainer.compute_loss keeps it the same way).
        self._total_train_tokens += int(inputs["attention_mask"].sum()) if "attention_mask" in inputs \
            else inputs["input_ids"].numel()
        self._metrics["train"]["num_tokens"] = [self._total_train_tokens]
        return loss


ds = load_dataset("json", data_files=DATA, split="train")
cfg = SFTConfig(output_dir=OUT, per_device_train_batch_size=4, gradient_accumulation_steps=1, max_steps=STEPS,
                learning_rate=1e-4, lr_scheduler_type="linear", warmup_steps=0, logging_steps=1, save_strategy="no",
                report_to=[], max_length=256, packing=False, padding_free=False, use_cpu=True, bf16=False, fp16=False,
                dataloader_num_workers=0, seed=42, completion_only_loss=True, gradient_checkpointing=False,
                disable_tqdm=True, model_init_kwargs={"dtype": torch.float32})
lora = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                  target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
trainer = BenchTrainer(model=MODEL, args=cfg, train_dataset=ds, peft_config=lora, callbacks=[Probe()],
                       processing_class=AutoTokenizer.from_pretrained(MODEL), compact=SIDE != "trl",
                       compile_backbone=SIDE == "trl-compile")
trainer.train()
emit({"type": "end"})
