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
(metrics.py). trainer-job does not start it yet: the engine is refused at submission while the
deployment lacks a GPU rollout engine (src/plan/engine_capabilities.cpp).
"""
from __future__ import annotations

import argparse
import http.server
import json
import os
import pathlib
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

    def take(self) -> list[float]:
        with self.lock:
            out, self.scored = self.scored, []
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
    log = out / "metrics.jsonl"
    env = dict(os.environ, VERL_FILE_LOGGER_PATH=str(log))
    proc = subprocess.Popen([sys.executable, "-m", "verl.trainer.main_ppo", *translate.as_hydra_overrides(keys)],
                            stdout=sys.stderr, stderr=sys.stderr, stdin=subprocess.DEVNULL, env=env, cwd=str(out))
    ch.emit("phase", phase="TRAINING", totalSteps=total, device="cuda:0")
    iterations = int(config["rlHyperparams"]["iterationsPerBatch"])
    seen, last = 0, None
    while True:
        done = proc.poll() is not None
        if ch.stop.is_set() and not done:
            proc.terminate()
        if log.exists():
            lines = log.read_text().splitlines()
            for line in lines[seen:]:
                parsed = metrics.parse_line(line)
                if parsed is not None:
                    last = metrics.step_event(parsed[0], parsed[1], total_steps=total, iterations=iterations,
                                              rows=len(rows), prompts_per_step=int(config["rlHyperparams"]["promptsPerStep"]),
                                              rewards=relay.take())
                    ch.emit("step", **last)
            seen = len(lines)
        if done:
            break
        time.sleep(1.0)
    if ch.stop.is_set():
        ch.emit("cancelled", steps=last["step"] if last else 0)
        return 0
    if proc.returncode != 0:
        ch.emit("failed", reason=f"verl's main_ppo exited with status {proc.returncode}; its log is the job's stderr")
        return 1
    ch.emit("completed", adapterDir=str(out / "checkpoints"), finalLoss=last["loss"] if last else 0.0,
            steps=last["step"] if last else 0, exportSeconds=0.0)
    return 0


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
