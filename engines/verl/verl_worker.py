#!/usr/bin/env python3
"""The verl engine's worker: trains a resolved GRPO/GSPO plan with verl (`verl.trainer.main_ppo`,
FSDP actor, vLLM rollouts on CUDA), given a GPU. It reads the same input file as the TRL worker
(engines/trl/trl_worker.py: plan, settingsSha, order, rows, totalSteps, outputDir) and speaks the
same job protocol on stdout/stdin (engines/trl/protocol.py); docs/engines.md ("verl") describes it.

    verl_worker.py --input FILE            train (needs CUDA and vLLM)
    verl_worker.py --input FILE --check    compose and validate verl's config only, print it, exit

It writes the prompts (the native engine's order) as the parquet verl reads, starts the reward
relay (reward.py posts each completion here; the job's graders score it), runs main_ppo with the
plan's overrides (translate.py) and turns each line of verl's file logger into a `step` event
(metrics.py), and each of verl's saves into a `checkpoint` event naming its LoRA adapter (the last
one is the `completed` adapter). trainer-job starts it for a verl run (src/job/verl_engine.h); the
engine is refused at submission while the deployment lacks a GPU rollout engine
(src/plan/engine_capabilities.cpp). Test-only: TRAINER_VERL_REPLAY names a recorded run that
replay.py plays back in main_ppo's place (docs/engines.md, "Test hooks").
"""
from __future__ import annotations

import argparse
import collections
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import time
import traceback

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.append(str(HERE.parent / "trl"))  # protocol.py, after ours: both folders have a translate.py

import metrics  # noqa: E402
import translate  # noqa: E402


def read_rows(path: str) -> list[tuple[int, dict]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                rows.append((n, json.loads(line)))
    return rows


def prompt_rows(numbered: list[tuple[int, dict]], order: list[int], relay: str) -> list[dict]:
    """verl's RL rows in the native order: prompt (the chat before the final assistant message),
    the gold answer as reward_model.ground_truth, and what the reward relay needs in extra_info."""
    out = []
    for i in order:
        line, row = numbered[i]
        messages = row.get("messages")
        if not isinstance(messages, list) or len(messages) < 2 or messages[-1].get("role") != "assistant":
            raise ValueError(f"config.dataset: line {line}: an RL row is a chat ending with the assistant's gold answer")
        users = [m.get("content", "") for m in messages[:-1] if m.get("role") == "user"]
        out.append({"data_source": "trainer", "prompt": messages[:-1],
                    "reward_model": {"style": "rule", "ground_truth": messages[-1].get("content", "")},
                    "extra_info": {"line": line, "input": users[-1] if users else "", "relay": relay}})
    return out


def compose(keys: dict):
    """verl's own ppo_trainer config with `keys` applied (hydra compose of the packaged yaml)."""
    import importlib.util

    from hydra import compose as hydra_compose, initialize_config_dir
    root = pathlib.Path(importlib.util.find_spec("verl").origin).parent
    with initialize_config_dir(config_dir=str(root / "trainer" / "config"), version_base=None):
        return hydra_compose(config_name="ppo_trainer", overrides=translate.as_hydra_overrides(keys))


def validate(cfg) -> None:
    """verl's own checks (verl.utils.config.validate_config, as main_ppo runs them), but for its
    vLLM LoRA-rank lookup, which imports vLLM (absent without CUDA): translate refuses a rank
    vLLM cannot serve instead."""
    from omegaconf import OmegaConf

    from verl.trainer.ppo.utils import need_critic, need_reference_policy
    from verl.utils.config import omega_conf_to_dataclass, validate_config
    checked = cfg.copy()
    OmegaConf.update(checked, "actor_rollout_ref.model.lora_rank", 0)
    validate_config(checked, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    omega_conf_to_dataclass(cfg.algorithm)


class RewardRelay:
    """A loopback HTTP server: reward.py posts one completion, the job's graders score it through
    the channel (each plan term, weighted), and the reward goes back. Keeps each score for the step."""

    def __init__(self, channel, terms: list[dict]) -> None:
        self.ch, self.terms = channel, terms
        self.lock = threading.Lock()
        self.scored: list[float] = []
        relay = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                item = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                reward = sum(float(t.get("weight", 1.0)) * relay.ch.score(k, [item])[0] for k, t in enumerate(relay.terms))
                with relay.lock:
                    relay.scored.append(reward)
                body = json.dumps({"reward": reward}).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, name="reward-relay", daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/score"

    def take(self, count: int) -> list[float]:
        """The first `count` rewards scored and not taken yet: a step's completions (verl scores each
        generation batch once, before it logs the step, so the scores queue up in step order)."""
        with self.lock:
            out, self.scored = self.scored[:count], self.scored[count:]
        return out


def train(ch, job: dict, check: bool) -> int:
    plan, total = job["plan"], int(job["totalSteps"])
    config = plan["config"]
    refused = translate.refusals(plan, total)
    if refused:
        ch.emit("failed", reason="the verl engine cannot train this plan: " + "; ".join(refused))
        return 1
    out = pathlib.Path(job["outputDir"])
    out.mkdir(parents=True, exist_ok=True)
    relay = RewardRelay(ch, config["reward"]["terms"]) if not check else None
    rows = prompt_rows(read_rows(config["dataset"]), job["order"], relay.url if relay else "")
    parquet = out / "train.parquet"
    import pandas
    pandas.DataFrame(rows).to_parquet(parquet)
    keys = translate.overrides(plan, total_steps=total, model_path=plan["baseModel"], train_files=str(parquet),
                               output_dir=str(out / "checkpoints"), reward_path=str(HERE / "reward.py"))
    cfg = compose(keys)
    validate(cfg)
    # What verl resolved at each translated key (read back from its composed config)
    from omegaconf import OmegaConf
    resolved = {}
    for key in keys:
        value = OmegaConf.select(cfg, key)
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        resolved[key] = "inf" if isinstance(value, float) and value == float("inf") else value  # JSON has no inf
    ch.emit("engine_config", engine="verl", config=resolved)
    if check:
        return 0
    ch.emit("phase", phase="PREPARING")
    ch.emit("resolved", config=config, settingsSha=job["settingsSha"])
    setup_done = threading.Event()
    ch.alive_until(setup_done)  # Ray's start, the model's load and vLLM's warm-up send no event of their own
    log = out / "metrics.jsonl"
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log))
    # verl's main_ppo, or under the test-only replay hook (TRAINER_VERL_REPLAY) the recorded run
    # replay.py plays back in its place (docs/engines.md, "Test hooks").
    trainer = ([str(HERE / "replay.py")] if os.environ.get("TRAINER_VERL_REPLAY")
               else ["-m", "verl.trainer.main_ppo"])
    proc = subprocess.Popen([sys.executable, *trainer, *translate.as_hydra_overrides(keys)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                            cwd=str(out), text=True, errors="replace")
    said = VerlLog(proc.stdout)
    ch.emit("phase", phase="TRAINING", totalSteps=total, device="cuda:0")
    iterations = int(config["rlHyperparams"]["iterationsPerBatch"])
    per_step = int(config["rlHyperparams"]["promptsPerStep"]) * int(config["rlHyperparams"]["groupSize"])
    saves = Saves(out / "checkpoints", out / "adapters", iterations)
    seen, last, final = 0, None, None
    while True:
        done = proc.poll() is not None
        if ch.stop.is_set() and not done:
            proc.terminate()
        if log.exists():
            lines = log.read_text().splitlines()
            for line in lines[seen:]:
                parsed = metrics.parse_line(line)
                if parsed is not None:
                    setup_done.set()
                    last = metrics.step_event(parsed[0], parsed[1], total_steps=total, iterations=iterations,
                                              rows=len(rows), prompts_per_step=int(config["rlHyperparams"]["promptsPerStep"]),
                                              rewards=relay.take(per_step))
                    ch.emit("step", **last)
            seen = len(lines)
        # verl's saves of the steps reported so far, each as its LoRA adapter (a `weights` snapshot)
        for step, adapter, seconds in saves.new(up_to=last["step"] if last else 0):
            final = (step, adapter)
            if step < total:
                ch.emit("checkpoint", step=step, adapterDir=adapter, checkpointSeconds=seconds)
        if done:
            break
        time.sleep(1.0)
    setup_done.set()
    said.join()
    if ch.stop.is_set():
        ch.emit("cancelled", steps=last["step"] if last else 0)
        return 0
    if proc.returncode != 0:
        ch.emit("failed", reason=f"verl's main_ppo exited with status {proc.returncode}: {said.error()}")
        return 1
    if final is None or final[0] != total:
        ch.emit("failed", reason=f"verl's main_ppo ended without saving the adapter of its last step ({total}); "
                                 f"its saves: {saves.steps() or 'none'}")
        return 1
    ch.emit("phase", phase="EXPORTING")
    ch.emit("completed", adapterDir=final[1], finalLoss=last["loss"] if last else 0.0, steps=total, exportSeconds=0.0)
    return 0


class VerlLog:
    """verl's output (main_ppo's, Ray's, vLLM's), copied to the job's log as it comes, its last lines
    kept: a failed run's reason is verl's own words."""

    def __init__(self, stream, keep: int = 200) -> None:
        self.lines: collections.deque[str] = collections.deque(maxlen=keep)

        def copy():
            for line in stream:
                sys.stderr.write(line)
                self.lines.append(line.rstrip("\n"))
            stream.close()

        self.thread = threading.Thread(target=copy, name="verl-log", daemon=True)
        self.thread.start()

    def join(self) -> None:
        self.thread.join(timeout=30)

    def error(self) -> str:
        """The last exception line verl printed (`SomeError: what`), else its last line."""
        for line in reversed(self.lines):
            text = line.strip()
            head = text.split(":", 1)[0].split(" ")[-1]
            if ":" in text and (head.endswith("Error") or head.endswith("Exception")):
                return text[:1000]
        tail = [line for line in self.lines if line.strip()]
        return tail[-1][:1000] if tail else "it printed nothing"


class Saves:
    """verl's checkpoints (trainer.default_local_dir/global_step_N/actor, announced by
    latest_checkpointed_iteration.txt once written) turned into PEFT adapters: verl's own model
    merger (`verl.model_merger merge --backend fsdp`) writes each one's LoRA weights as
    lora_adapter/{adapter_model.safetensors, adapter_config.json}. A replayed run (replay.py) saves
    that folder itself. Only the adapter is kept: verl's sharded optimizer and RNG states are not
    taken as a training state (docs/engines.md)."""

    def __init__(self, checkpoints: pathlib.Path, adapters: pathlib.Path, iterations: int) -> None:
        self.checkpoints, self.adapters, self.iterations = checkpoints, adapters, iterations
        self.taken: list[int] = []

    def steps(self) -> list[int]:
        return [n * self.iterations for n in self.taken]

    def new(self, up_to: int) -> list[tuple[int, str, float]]:
        """The saves not taken yet of steps up to `up_to` (our steps): (step, adapter folder, seconds)."""
        marker = self.checkpoints / "latest_checkpointed_iteration.txt"
        if not marker.exists():
            return []
        latest = int(marker.read_text().strip() or 0)
        out = []
        for n in sorted(int(p.name.split("_")[-1]) for p in self.checkpoints.glob("global_step_*")):
            if n in self.taken or n > latest or n * self.iterations > up_to:
                continue
            t0 = time.time()
            out.append((n * self.iterations, self.adapter_of(n), time.time() - t0))
            self.taken.append(n)
        return out

    def adapter_of(self, n: int) -> str:
        actor = self.checkpoints / f"global_step_{n}" / "actor"
        adapter = actor / "lora_adapter"
        if not (adapter / "adapter_model.safetensors").exists():
            target = self.adapters / f"step-{n * self.iterations}"
            subprocess.run([sys.executable, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir",
                            str(actor), "--target_dir", str(target)], check=True, stdout=sys.stderr, stderr=sys.stderr)
            adapter = target / "lora_adapter"
            for other in target.iterdir():  # the merged full model beside it: not kept
                if other != adapter:
                    shutil.rmtree(other) if other.is_dir() else other.unlink()
        if not (adapter / "adapter_model.safetensors").exists() or not (adapter / "adapter_config.json").exists():
            raise RuntimeError(f"verl's checkpoint of step {n} holds no LoRA adapter ({adapter})")
        return str(adapter)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--input", required=True)
    ap.add_argument("--check", action="store_true", help="compose and validate verl's config, then exit")
    args = ap.parse_args()
    from protocol import Channel
    ch = Channel()
    try:
        return train(ch, json.loads(pathlib.Path(args.input).read_text()), args.check)
    except Exception as e:
        traceback.print_exc()
        ch.emit("failed", reason=f"verl worker: {type(e).__name__}: {e}")
        return 1


if __name__ == "__main__":
    sys.exit(main())
