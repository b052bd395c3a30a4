"""TRL's training loop reported as job-protocol events, and steered by trainer-job's commands.

step        on each log of the Trainer (logging_steps=1: once per optimizer step), with the loss,
            learning rate (the one the optimizer used), pre-clip gradient norm, token accuracy
            and the step's tokens as the training step saw them.
checkpoint  after each save, once the Trainer's checkpoint-N folder is split into our snapshot's
            two kinds: the PEFT adapter (weights) and the rest (optimizer, scheduler, RNG, trainer
            state: trainingState). Saves happen at execution.saveEvery, at a pause, at the plan's
            pauseAtStep and after the last step.
"""
from __future__ import annotations

import os
import pathlib
import shutil
import time

from transformers import TrainerCallback

ADAPTER_FILES = ("adapter_model.safetensors", "adapter_config.json")


class TokenCounter:
    """Counts the real and labelled tokens of each micro-batch the Trainer trains on
    (count() is called from its training_step, wrapped by the worker)."""

    def __init__(self) -> None:
        self.batch_tokens = 0
        self.trained_tokens = 0

    def count(self, batch) -> None:
        if not hasattr(batch, "keys") or "input_ids" not in batch:
            return  # GRPO's generation batch: its tokens are not counted (docs/engines.md)
        if "attention_mask" in batch:
            self.batch_tokens += int(batch["attention_mask"].sum())
        else:
            self.batch_tokens += int(batch["input_ids"].numel())
        if "labels" in batch:
            self.trained_tokens += int((batch["labels"][:, 1:] != -100).sum())

    def take(self) -> tuple[int, int]:
        out = (self.batch_tokens, self.trained_tokens)
        self.batch_tokens = self.trained_tokens = 0
        return out


def split_checkpoint(checkpoint: pathlib.Path, snapshot: pathlib.Path) -> tuple[str, str]:
    """Moves a Trainer checkpoint folder into SNAPSHOT/adapter and SNAPSHOT/state."""
    adapter, state = snapshot / "adapter", snapshot / "state"
    if snapshot.exists():
        shutil.rmtree(snapshot)
    adapter.mkdir(parents=True)
    state.mkdir(parents=True)
    for f in checkpoint.iterdir():
        if f.name in ADAPTER_FILES:
            f.rename(adapter / f.name)
        elif f.name == "README.md":  # PEFT's model card: not part of either kind
            f.unlink()
        else:
            f.rename(state / f.name)
    shutil.rmtree(checkpoint)
    return str(adapter), str(state)


def join_checkpoint(weights_dir: str, state_dir: str, into: pathlib.Path) -> str:
    """A snapshot's two kinds put back together as the checkpoint folder TRL resumes from."""
    if into.exists():
        shutil.rmtree(into)
    into.mkdir(parents=True)
    for src in (pathlib.Path(weights_dir), pathlib.Path(state_dir)):
        for f in src.iterdir():
            if f.is_file() and f.name != "manifest.json":
                shutil.copy2(f, into / f.name)
    return str(into)


def fault_injection() -> str:
    """Tests only: TRAINER_TRL_FAULT, or the first line of the file TRAINER_TRL_FAULT_FILE names
    (read when the worker starts, so a test changes it between runs): crash@N, hang@N or garbage@N."""
    path = os.environ.get("TRAINER_TRL_FAULT_FILE")
    if path and os.path.exists(path):
        return (open(path).read().strip().splitlines() or [""])[0]
    return os.environ.get("TRAINER_TRL_FAULT", "")


class ProtocolCallback(TrainerCallback):
    def __init__(self, channel, counter: TokenCounter, *, total_steps: int, rows: int, batch_rows: int,
                 save_every: int | None, pause_at: int | None, snapshots: pathlib.Path, rl_hook=None) -> None:
        self.ch = channel
        self.counter = counter
        self.total_steps = total_steps
        self.rows = max(1, rows)
        self.batch_rows = batch_rows  # rows per optimizer step
        self.save_every = save_every
        self.pause_at = pause_at
        self.snapshots = snapshots
        # GRPO: (step, logs, step seconds) -> (the step event's rl object, batch tokens, trained tokens)
        self.rl_hook = rl_hook
        self.fault = fault_injection()
        self.outcome = "completed"  # or paused, cancelled
        self.last_loss = 0.0
        self.last_step = 0
        self.last_save: tuple[str, str] | None = None
        self._lr = 0.0
        self._t_step = 0.0
        self._step_seconds = 0.0
        self._tokens = (0, 0)

    # --- the loop
    def on_step_begin(self, args, state, control, **kw):
        self._t_step = time.perf_counter()

    def on_pre_optimizer_step(self, args, state, control, optimizer=None, **kw):
        if optimizer is not None:
            self._lr = float(optimizer.param_groups[0]["lr"])

    def on_step_end(self, args, state, control, **kw):
        self._step_seconds = time.perf_counter() - self._t_step
        self._tokens = self.counter.take()
        step = state.global_step
        self._inject_fault(step)
        if self.ch.pause.is_set() or (self.pause_at and step == self.pause_at and step < self.total_steps):
            self.outcome = "paused"
            control.should_save = True
            control.should_training_stop = True
        elif self.ch.stop.is_set():
            self.outcome = "cancelled"
            control.should_training_stop = True
        elif step >= self.total_steps or (self.save_every and step % self.save_every == 0):
            control.should_save = True
        return control

    def on_log(self, args, state, control, logs=None, **kw):
        if not logs or "loss" not in logs or "train_runtime" in logs:
            return
        step = state.global_step
        batch_tokens, trained = self._tokens
        seconds = self._step_seconds
        rl = None
        if self.rl_hook:
            rl, batch_tokens, trained = self.rl_hook(step, logs, seconds)
        self.last_loss = float(logs["loss"])
        self.last_step = step
        self.ch.emit("step", step=step, totalSteps=self.total_steps,
                     epoch=((step - 1) * self.batch_rows) // self.rows,
                     loss=self.last_loss, learningRate=self._lr, gradNorm=float(logs.get("grad_norm") or 0.0),
                     tokenAccuracy=float(logs.get("mean_token_accuracy", 0.0)),
                     tokensPerSecond=batch_tokens / seconds if seconds > 0 else 0.0,
                     batchTokens=batch_tokens, trainedTokens=trained, stepSeconds=seconds,
                     rl=rl)

    def on_save(self, args, state, control, **kw):
        t0 = time.perf_counter()
        step = state.global_step
        checkpoint = pathlib.Path(args.output_dir) / f"checkpoint-{step}"
        adapter, state_dir = split_checkpoint(checkpoint, self.snapshots / f"step-{step}")
        self.last_save = (adapter, state_dir)
        if step < self.total_steps or self.outcome == "paused":  # the last one is the completed event's
            self.ch.emit("checkpoint", step=step, adapterDir=adapter, stateDir=state_dir,
                         checkpointSeconds=time.perf_counter() - t0)

    # --- fault injection (fault_injection()): the worker crashes, hangs or writes a malformed line at step N
    def _inject_fault(self, step: int) -> None:
        if not self.fault:
            return
        kind, _, at = self.fault.partition("@")
        if not at.isdigit() or int(at) != step:
            return
        print(f"trl worker: fault injection {self.fault}", flush=True)
        if kind == "crash":
            os._exit(3)
        elif kind == "hang":
            while True:
                time.sleep(3600)
        elif kind == "garbage":
            self.ch.raw("this is not an event {")


class ContinueState(TrainerCallback):
    """runs continue: the parent snapshot's AdamW moments (and step counts) and RNG states, loaded
    once the Trainer has built the child's own optimizer and schedule (the schedule spans the
    child's steps, as the native engine's continued run; the learning rate is the child's)."""

    def __init__(self, trainer, state_dir: str) -> None:
        self.trainer = trainer
        self.state_dir = pathlib.Path(state_dir)

    def on_train_begin(self, args, state, control, optimizer=None, **kw):
        import torch
        saved = torch.load(self.state_dir / "optimizer.pt", map_location="cpu", weights_only=True)
        current = optimizer.state_dict()
        shape = lambda sd: [len(g["params"]) for g in sd["param_groups"]]  # noqa: E731
        if shape(saved) != shape(current):
            raise ValueError(f"the snapshot's optimizer holds parameter groups of sizes {shape(saved)}, this run's "
                             f"adapter {shape(current)}: continue with the parent's LoRA settings")
        current["state"] = saved["state"]  # the moments; param_groups (the learning rate) stay the child's
        optimizer.load_state_dict(current)
        self.trainer._load_rng_state(str(self.state_dir))
