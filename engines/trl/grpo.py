"""GRPO and GSPO through TRL's GRPOTrainer (PEFT LoRA). The rewards are not reimplemented here: each
of the plan's reward terms becomes a TRL reward function that asks trainer-job to score the
completions (Channel.score), so the job's own graders (json-label-match, rule:, http:, model:...)
score a TRL run exactly as they score a native one. Each generation batch's completions and rewards
are appended to OUTPUT/rollouts.jsonl as the native engine writes them (`runs rollouts`)."""
from __future__ import annotations

import json


def rl_rows(rows: list[tuple[int, dict]]) -> list[dict]:
    """Chat rows (line, row) as GRPO prompts: the conversation before the final assistant message,
    that message's content as the gold answer."""
    out = []
    for line, row in rows:
        messages = row.get("messages")
        if not isinstance(messages, list) or len(messages) < 2 or messages[-1].get("role") != "assistant":
            raise ValueError(f"config.dataset: line {line}: an RL row is a chat ending with the assistant's gold answer")
        users = [m.get("content", "") for m in messages[:-1] if m.get("role") == "user"]
        out.append({"prompt": messages[:-1], "gold": messages[-1].get("content", ""), "line": line,
                    "input": users[-1] if users else ""})
    return out


def text_of(completion) -> str:
    if isinstance(completion, list):  # conversational: [{"role": "assistant", "content": ...}]
        return "".join(m.get("content", "") for m in completion)
    return str(completion)


class Rewards:
    """The plan's reward terms as TRL reward functions, and what the last batch scored."""

    def __init__(self, channel, terms: list[dict]) -> None:
        self.ch = channel
        self.terms = terms
        self.last: dict = {}  # term index -> scores of the last batch
        self.batch: list[dict] = []  # the last batch's rows and completions
        self.on_first_score = None  # called once, when the first rollouts are scored (engine_runtime)

    def functions(self):
        funcs = []
        for k, term in enumerate(self.terms):
            def score(prompts, completions, gold, line, input, _k=k, **kw):
                texts = [text_of(c) for c in completions]
                items = [{"row": int(r), "input": i, "output": t, "expected": g}
                         for r, i, t, g in zip(line, input, texts, gold)]
                scores = self.ch.score(_k, items)
                if _k == 0 and self.on_first_score is not None:
                    first, self.on_first_score = self.on_first_score, None
                    first()
                self.last[_k] = scores
                if _k == 0:
                    self.batch = [{"line": int(r), "prompt": i, "completion": t} for r, i, t in zip(line, input, texts)]
                return scores
            score.__name__ = term.get("name") or term["kind"]
            funcs.append(score)
        return funcs

    def weights(self) -> list[float]:
        return [float(t.get("weight", 1.0)) for t in self.terms]

    def rollouts(self, step: int, path: str, tokenizer) -> list[dict]:
        """Appends the last batch to PATH as the native engine's rollouts lines; the step's summary."""
        out = []
        w = self.weights()
        names = [f.get("name") or f["kind"] for f in self.terms]
        with open(path, "a", encoding="utf-8") as f:
            for n, b in enumerate(self.batch):
                raw = [self.last.get(k, [0.0] * len(self.batch))[n] for k in range(len(self.terms))]
                reward = sum(wk * r for wk, r in zip(w, raw))
                tokens = len(tokenizer(b["completion"], add_special_tokens=False)["input_ids"])
                line = {"step": step, "promptIndex": b["line"] - 1, "prompt": b["prompt"], "completion": b["completion"],
                        "reward": reward, "terms": [{"name": names[k], "weight": w[k], "raw": raw[k], "failed": False}
                                                    for k in range(len(raw))],
                        "completionTokens": tokens, "terminated": True}
                f.write(json.dumps(line) + "\n")
                out.append({"promptIndex": b["line"] - 1, "completion": b["completion"][:2000], "reward": reward})
        return out


def grpo_kwargs(plan: dict, total_steps: int, output_dir: str, use_cpu: bool) -> dict:
    config = plan["config"]
    rl, opt = config["rlHyperparams"], config["rlHyperparams"]["optimizer"]
    fp32 = config["model"]["precision"] == "FP32"
    from translate import warmup_steps
    return {
        "output_dir": output_dir, "max_steps": int(total_steps),
        "per_device_train_batch_size": int(rl["promptsPerStep"]) * int(rl["groupSize"]),
        "gradient_accumulation_steps": 1, "num_generations": int(rl["groupSize"]),
        "max_completion_length": int(rl["maxCompletionLength"]), "temperature": float(rl["temperature"]),
        "top_p": float(rl["topP"]), "top_k": int(rl["topK"]), "epsilon": float(rl["clipLow"]),
        "epsilon_high": float(rl["clipHigh"]), "num_iterations": int(rl["iterationsPerBatch"]),
        "loss_type": rl["lossAggregation"], "scale_rewards": rl["scaleRewards"], "beta": float(config.get("klBeta", 0.0)),
        "importance_sampling_level": "sequence" if config["method"] == "gspo" else "token",
        "learning_rate": float(opt["learningRate"]),
        "lr_scheduler_type": {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}[opt["schedule"]],
        "warmup_steps": warmup_steps(opt, total_steps), "optim": "adamw_torch",
        "adam_beta1": float(opt["beta1"]), "adam_beta2": float(opt["beta2"]), "adam_epsilon": float(opt["epsilon"]),
        "weight_decay": float(opt["weightDecay"]), "max_grad_norm": float(opt["maxGradNorm"]),
        "seed": int(config["hyperparams"]["training"]["seed"]), "shuffle_dataset": False,
        "bf16": not fp32, "fp16": False, "use_cpu": use_cpu, "use_vllm": False, "dataloader_num_workers": 0,
        "logging_steps": 1, "save_strategy": "no", "report_to": [], "disable_tqdm": True,
        "model_init_kwargs": {"dtype": "float32" if fp32 else "bfloat16"},
    }


def rl_figures(logs: dict, rollouts: list[dict], names: list[str]) -> dict:
    """TRL's GRPO logs as the step event's `rl` object (the names of rl/rl_step.cpp)."""
    g = lambda k: float(logs.get(k, 0.0) or 0.0)  # noqa: E731
    return {"rewardMean": g("reward"), "rewardStd": g("reward_std"), "zeroStdGroupShare": g("frac_reward_zero_std"),
            "terms": [{"name": n, "mean": g(f"rewards/{n}/mean"), "std": g(f"rewards/{n}/std")} for n in names],
            "completionLengthMean": g("completions/mean_length"), "completionLengthMin": g("completions/min_length"),
            "completionLengthMax": g("completions/max_length"), "truncatedShare": g("completions/clipped_ratio"),
            "kl": g("kl"), "entropy": g("entropy"), "clipRatio": g("clip_ratio/region_mean"),
            "clipRatioLow": g("clip_ratio/low_mean"), "clipRatioHigh": g("clip_ratio/high_mean"),
            "completionsScored": len(rollouts), "rollouts": rollouts}
