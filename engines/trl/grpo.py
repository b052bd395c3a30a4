"""GRPO and GSPO through TRL's GRPOTrainer (PEFT LoRA). The rewards are not reimplemented here: each
of the plan's reward terms becomes a TRL reward function that asks trainer-job to score the
completions (Channel.score), so the job's own graders (json-label-match, rule:, http:, model:...)
score a TRL run exactly as they score a native one. Each generation batch's completions and rewards
are appended to OUTPUT/rollouts.jsonl as the native engine writes them (`runs rollouts`)."""
from __future__ import annotations

import json
import time


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


# The failure causes a step counts, in the native engine's order (rl/rl_step.h kCauses).
CAUSES = ("timeout", "unreachable", "no_verdict", "gold_not_label")


class Rewards:
    """The plan's reward terms as TRL reward functions, and what the last batch scored."""

    def __init__(self, channel, terms: list[dict], *, max_completion_length: int, eos_token_id) -> None:
        self.ch = channel
        self.terms = terms
        self.max_completion_length = max_completion_length
        self.eos = {eos_token_id} if isinstance(eos_token_id, int) else set(eos_token_id or [])
        self.last: dict = {}  # term index -> the job's reply for the last batch (scores, failures, ...)
        self.seconds: dict = {}  # term index -> seconds its scoring took for the last batch
        self.batch: list[dict] = []  # the last batch's rows and completions
        self.on_first_score = None  # called once, when the first rollouts are scored (engine_runtime)

    def functions(self):
        funcs = []
        for k, term in enumerate(self.terms):
            def score(prompts, completions, gold, line, input, completion_ids=None, _k=k, **kw):
                texts = [text_of(c) for c in completions]
                items = [{"row": int(r), "input": i, "output": t, "expected": g}
                         for r, i, t, g in zip(line, input, texts, gold)]
                t0 = time.perf_counter()
                reply = self.ch.score_reply(_k, items)
                self.seconds[_k] = time.perf_counter() - t0
                if _k == 0 and self.on_first_score is not None:
                    first, self.on_first_score = self.on_first_score, None
                    first()
                self.last[_k] = reply
                if _k == 0:
                    ids = completion_ids or [[] for _ in texts]
                    self.batch = [{"line": int(r), "prompt": i, "completion": t, "length": len(c),
                                   "terminated": len(c) < self.max_completion_length or (bool(c) and c[-1] in self.eos)}
                                  for r, i, t, c in zip(line, input, texts, ids)]
                return reply["scores"]
            score.__name__ = term.get("name") or term["kind"]
            funcs.append(score)
        return funcs

    def weights(self) -> list[float]:
        return [float(t.get("weight", 1.0)) for t in self.terms]

    def names(self) -> list[str]:
        return [t.get("name") or t["kind"] for t in self.terms]

    def _reply(self, k: int) -> dict:
        n = len(self.batch)
        return self.last.get(k) or {"scores": [0.0] * n, "failures": [""] * n, "callSeconds": [0.0] * n}

    def rollouts(self, step: int, path: str) -> list[dict]:
        """Appends the last batch to PATH as the native engine's rollouts lines; each completion's
        reward, length and whether it ended on its own."""
        out = []
        w, names = self.weights(), self.names()
        with open(path, "a", encoding="utf-8") as f:
            for n, b in enumerate(self.batch):
                replies = [self._reply(k) for k in range(len(self.terms))]
                raw = [r["scores"][n] for r in replies]
                failed = [bool((r.get("failures") or [""] * len(self.batch))[n]) for r in replies]
                reward = sum(wk * x for wk, x in zip(w, raw))
                line = {"step": step, "promptIndex": b["line"] - 1, "prompt": b["prompt"], "completion": b["completion"],
                        "reward": reward, "terms": [{"name": names[k], "weight": w[k], "raw": raw[k], "failed": failed[k]}
                                                    for k in range(len(raw))],
                        "completionTokens": b["length"], "terminated": b["terminated"]}
                f.write(json.dumps(line) + "\n")
                out.append({"promptIndex": b["line"] - 1, "completion": b["completion"], "reward": reward,
                            "length": b["length"], "terminated": b["terminated"]})
        return out

    def term_figures(self, logs: dict) -> list[dict]:
        """Each term's figures as the native step names them: TRL's mean and std, and the job's
        seconds, failures by cause, call seconds and judge tokens."""
        g = lambda key: float(logs.get(key, 0.0) or 0.0)  # noqa: E731
        out = []
        for k, name in enumerate(self.names()):
            reply = self._reply(k)
            causes = [c for c in (reply.get("failures") or []) if c]
            out.append({"name": name, "mean": g(f"rewards/{name}/mean"), "std": g(f"rewards/{name}/std"),
                        "seconds": self.seconds.get(k, 0.0), "failures": len(causes),
                        "failuresByCause": {c: causes.count(c) for c in CAUSES},
                        "callSeconds": [float(x) for x in reply.get("callSeconds") or []],
                        "judgeTokens": {"input": int(reply.get("inputTokens", 0)),
                                        "output": int(reply.get("outputTokens", 0))}})
        return out


class Phases:
    """The seconds of a step's phases as the native engine splits them, measured around
    GRPOTrainer's own methods: generation (_generate), the old and reference log-probabilities
    computed while a batch is scored (_get_per_token_logps_and_entropies inside
    _generate_and_score_completions); rewards are timed by Rewards."""

    def __init__(self, trainer) -> None:
        self.generation = self.old_logprob = 0.0
        self._scoring = False
        generate, prepare, logps = (trainer._generate, trainer._generate_and_score_completions,
                                    trainer._get_per_token_logps_and_entropies)

        def timed_generate(*a, **kw):
            t0 = time.perf_counter()
            try:
                return generate(*a, **kw)
            finally:
                self.generation += time.perf_counter() - t0

        def scoring(*a, **kw):
            self._scoring = True
            try:
                return prepare(*a, **kw)
            finally:
                self._scoring = False

        def timed_logps(*a, **kw):
            if not self._scoring:
                return logps(*a, **kw)  # the training forward: the actor update's
            t0 = time.perf_counter()
            try:
                return logps(*a, **kw)
            finally:
                self.old_logprob += time.perf_counter() - t0

        trainer._generate = timed_generate
        trainer._generate_and_score_completions = scoring
        trainer._get_per_token_logps_and_entropies = timed_logps

    def take(self) -> tuple[float, float]:
        out = (self.generation, self.old_logprob)
        self.generation = self.old_logprob = 0.0
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


def rl_figures(logs: dict, rollouts: list[dict], terms: list[dict], *, generation_seconds: float,
               reward_seconds: float, old_logprob_seconds: float, step_seconds: float) -> dict:
    """The step event's `rl` object with the native engine's fields (rl/rl_step.cpp): TRL's GRPO logs
    for what TRL computes (the batch's reward std, the zero-std groups, KL, entropy, clipping), the
    batch's own completions and the job's replies for the rest."""
    g = lambda k: float(logs.get(k, 0.0) or 0.0)  # noqa: E731
    rewards = [r["reward"] for r in rollouts]
    lengths = [int(r["length"]) for r in rollouts]
    ended = [r["length"] for r in rollouts if r["terminated"]]
    n = max(1, len(rollouts))
    generated = sum(lengths)
    update = max(0.0, step_seconds - generation_seconds - reward_seconds - old_logprob_seconds)
    idle = (lambda x: min(1.0, max(0.0, x)))  # noqa: E731
    return {"rewardMean": g("reward"), "rewardStd": g("reward_std"),
            "rewardZeroShare": sum(1 for r in rewards if r == 0.0) / n,
            "rewardFullShare": sum(1 for r in rewards if r >= 1.0 - 1e-9) / n,
            "zeroStdGroupShare": g("frac_reward_zero_std"), "terms": terms, "rewards": rewards,
            "completionsScored": len(rollouts), "generatedTokens": generated, "completionLengths": lengths,
            "completionLengthMean": generated / n, "completionLengthMin": min(lengths, default=0),
            "completionLengthMax": max(lengths, default=0),
            "completionLengthTerminatedMean": sum(ended) / len(ended) if ended else 0.0,
            "truncatedShare": g("completions/clipped_ratio"),
            "kl": g("kl"), "entropy": g("entropy"), "clipRatio": g("clip_ratio/region_mean"),
            "clipRatioLow": g("clip_ratio/low_mean"), "clipRatioHigh": g("clip_ratio/high_mean"),
            "generationSeconds": generation_seconds, "rewardSeconds": reward_seconds,
            "oldLogprobSeconds": old_logprob_seconds, "actorUpdateSeconds": update,
            "generationTokensPerSecond": generated / generation_seconds if generation_seconds > 0 else 0.0,
            "trainerIdle": idle((generation_seconds + reward_seconds) / step_seconds) if step_seconds > 0 else 0.0,
            "rolloutIdle": idle(1.0 - generation_seconds / step_seconds) if step_seconds > 0 else 0.0,
            "rollouts": [{"promptIndex": r["promptIndex"], "completion": r["completion"][:2000], "reward": r["reward"]}
                         for r in rollouts]}
