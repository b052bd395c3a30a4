#!/usr/bin/env python3
"""The TRL engine's worker: trains a resolved plan with TRL's SFTTrainer, or GRPOTrainer for grpo and
gspo (grpo.py), with PEFT LoRA, started by
trainer-job (src/job/trl_engine.cpp) when the plan's engine is trl. docs/engines.md describes it.

    trl_worker.py --input FILE

FILE (written by trainer-job) holds: plan (plan::to_json of the resolved plan), settingsSha,
order (the dataset's row indices in the order the native engine trains on them, epoch after epoch),
rows (rows per epoch), totalSteps, outputDir, rolloutsPath (GRPO's rollouts file), resume (the
restored snapshot's weightsDir and stateDir, a paused run's resume; null otherwise), startFrom
(a child run's or a warm start's weightsDir: the adapter alone; null otherwise) and continueFrom
(runs continue: the parent snapshot's weightsDir and stateDir, whose optimizer and RNG carry on in
the child's own steps; null otherwise), and tokenized (an SFT dataset with chat rows: each row's
input_ids and assistant_masks as the native engine tokenizes and masks it; null otherwise). Events go to stdout, commands come on stdin (protocol.py).
Exit status 0 after completed, paused or cancelled; 1 after failed.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import sys
import threading
import time
import traceback

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

from protocol import Channel  # noqa: E402
import translate  # noqa: E402


def read_rows(path: str) -> list[tuple[int, dict]]:
    """The dataset's rows with their 1-based line numbers."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except ValueError as e:
                    raise ValueError(f"{path}:{n}: not a JSON row ({e})") from None
    return rows


def train(ch: Channel, job: dict) -> int:
    t_start = time.time()
    plan, total = job["plan"], int(job["totalSteps"])
    config = plan["config"]
    refused = translate.refusals(config)
    if refused:
        ch.emit("failed", reason="the trl engine cannot train this plan: " + "; ".join(refused))
        return 1
    ch.emit("phase", phase="PREPARING")
    setup_done = threading.Event()
    ch.alive_until(setup_done)
    ch.emit("resolved", config=config, settingsSha=job["settingsSha"])
    numbered = read_rows(config["dataset"])
    rows = [r for _, r in numbered]
    order = job["order"]
    if any(i < 0 or i >= len(rows) for i in order):
        raise ValueError(f"the job's row order names a row past the dataset's {len(rows)}")
    ch.emit("data_fit", rows=len(rows))
    ch.emit("data_split", trainRows=len(rows), validationRows=0)

    import torch  # noqa: E402  (slow imports after the first events: trainer-job sees the worker alive)
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer, set_seed
    from trl import SFTConfig, SFTTrainer

    from callback import ProtocolCallback, TokenCounter, join_checkpoint

    use_cpu = plan["execution"]["gpus"] == 0 or not torch.cuda.is_available()
    out = pathlib.Path(job["outputDir"])
    rl = config["method"] != "sft"
    if rl:
        import grpo
        kwargs = grpo.grpo_kwargs(plan, total, str(out / "trainer"), use_cpu)
    else:
        kwargs = translate.sft_kwargs(plan, total, str(out / "trainer"), use_cpu)
    dtype = kwargs["model_init_kwargs"]["dtype"]
    kwargs["model_init_kwargs"] = {"dtype": getattr(torch, dtype)}
    set_seed(kwargs["seed"])  # the adapter's initialisation as well as the run's
    tokenizer = AutoTokenizer.from_pretrained(plan["baseModel"])
    model, lora = plan["baseModel"], LoraConfig(**translate.lora_kwargs(config))
    start = job.get("startFrom") or job.get("continueFrom")
    if start:
        # A child run (runs branch --restore weights, runs continue) or a warm start: the snapshot's
        # adapter, trainable, on the base model. startFrom: a fresh optimizer, schedule, RNG and data
        # order; continueFrom: the parent's optimizer moments and RNG too (ContinueState), the data
        # where the parent left it (trainer-job's order), the child's own steps and schedule.
        from peft import PeftModel
        from transformers import AutoModelForCausalLM
        base = AutoModelForCausalLM.from_pretrained(plan["baseModel"], **kwargs.pop("model_init_kwargs"))
        model, lora = PeftModel.from_pretrained(base, start["weightsDir"], is_trainable=True), None
    rewards = None
    if rl:
        from trl import GRPOConfig, GRPOTrainer
        prompts = grpo.rl_rows(numbered)
        rewards = grpo.Rewards(ch, config["reward"]["terms"], max_completion_length=int(kwargs["max_completion_length"]),
                               eos_token_id=tokenizer.eos_token_id)
        kwargs["reward_weights"] = rewards.weights()
        trainer = GRPOTrainer(model=model, reward_funcs=rewards.functions(), args=GRPOConfig(**kwargs),
                              train_dataset=Dataset.from_list([prompts[i] for i in order]), peft_config=lora,
                              processing_class=tokenizer)
    else:
        # Chat rows come tokenized by trainer-job as the native engine tokenizes them, with its loss
        # mask (the assistant's tokens) as assistant_masks: TRL trains on the same tokens.
        source = job["tokenized"] if job.get("tokenized") else rows
        trainer = SFTTrainer(model=model, args=SFTConfig(**kwargs),
                             train_dataset=Dataset.from_list([source[i] for i in order]), peft_config=lora,
                             processing_class=tokenizer)
    counter = TokenCounter()
    train_step = trainer.training_step

    def counted_step(model, inputs, *args, **kw):
        counter.count(inputs)
        return train_step(model, inputs, *args, **kw)

    trainer.training_step = counted_step
    training = config["hyperparams"]["training"]
    batch_rows = (int(config["rlHyperparams"]["promptsPerStep"]) if rl
                  else int(training["batchSize"]) * int(training["gradientAccumulation"]))
    rl_hook = None
    if rl:
        phases = grpo.Phases(trainer)
        seen_tokens = [0]  # TRL's num_tokens (prompt and completion tokens so far) at the last step

        def rl_hook(step, logs, step_seconds):
            """The step's rl object, its batch tokens (the generation batch's prompt and completion
            tokens, TRL's num_tokens since the last step) and trained tokens (the completions')."""
            generation, old_logprob = phases.take()
            rollouts = rewards.rollouts(step, job["rolloutsPath"])
            figures = grpo.rl_figures(logs, rollouts, rewards.term_figures(logs), generation_seconds=generation,
                                      reward_seconds=sum(rewards.seconds.values()), old_logprob_seconds=old_logprob,
                                      step_seconds=step_seconds)
            total_tokens = int(logs.get("num_tokens", 0) or 0)
            batch_tokens, seen_tokens[0] = max(0, total_tokens - seen_tokens[0]), total_tokens
            return figures, batch_tokens, figures["generatedTokens"]
    cb = ProtocolCallback(ch, counter, total_steps=total, rows=int(job["rows"]), rl_hook=rl_hook,
                          batch_rows=batch_rows,
                          save_every=plan["execution"].get("saveEvery"), pause_at=plan.get("pauseAtStep"),
                          snapshots=out / "snapshots")
    trainer.add_callback(cb)
    if job.get("continueFrom"):
        from callback import ContinueState
        trainer.add_callback(ContinueState(trainer, job["continueFrom"]["stateDir"]))

    # The engine's reports: its resolved arguments, and what setup decided and measured.
    import reports
    from transformers import TrainerCallback
    changed = []
    if plan["execution"]["gpus"] > 0 and use_cpu:
        changed.append({"field": "execution.gpus", "from": plan["execution"]["gpus"], "to": "cpu",
                        "why": "torch sees no CUDA device"})
    ch.emit("engine_config", engine="trl", config=reports.engine_config(trainer))
    ch.emit("engine_runtime", engine="trl", report=reports.setup_report(trainer, rl, dtype, changed, torch))

    class FirstStepMemory(TrainerCallback):
        sent = False

        def on_step_end(self, args, state, control, **kw):
            if not self.sent:  # the first step of this attempt
                self.sent = True
                ch.emit("engine_runtime", engine="trl",
                        report={"memory": {"afterFirstStep": reports.memory_now(trainer, torch)}})

    trainer.add_callback(FirstStepMemory())
    if rl:
        rewards.on_first_score = lambda: ch.emit(
            "engine_runtime", engine="trl", report={"memory": {"afterFirstRollout": reports.memory_now(trainer, torch)}})

    resume = None
    if job.get("resume"):
        resume = join_checkpoint(job["resume"]["weightsDir"], job["resume"]["stateDir"], out / "resume")
    ch.emit("phase", phase="TRAINING", totalSteps=total, device="cpu" if use_cpu else "cuda:0",
            startupSeconds=time.time() - t_start)
    setup_done.set()
    trainer.train(resume_from_checkpoint=resume)

    if cb.outcome == "paused":
        ch.emit("paused", step=cb.last_step)
    elif cb.outcome == "cancelled":
        ch.emit("cancelled", steps=cb.last_step)
    else:
        ch.emit("phase", phase="EXPORTING")
        t0 = time.time()
        if cb.last_save is None:  # the last step's save is the final adapter
            raise RuntimeError("TRL finished without saving the last step's checkpoint")
        adapter, state = cb.last_save
        ch.emit("completed", adapterDir=adapter, stateDir=state, finalLoss=cb.last_loss, steps=cb.last_step,
                exportSeconds=time.time() - t0)
    return 0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    args = ap.parse_args()
    ch = Channel()
    try:
        job = json.loads(pathlib.Path(args.input).read_text())
        return train(ch, job)
    except Exception as e:  # the run fails naming what TRL said; the trace goes to the log
        traceback.print_exc()
        ch.emit("failed", reason=f"trl worker: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    sys.exit(main())
