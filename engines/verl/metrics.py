"""verl's logged metrics (its `file` logger: one JSON line {"step": N, "data": {NAME: VALUE}} per
training step, VERL_FILE_LOGGER_PATH) translated into the job protocol's `step` event, with the `rl`
object under the native engine's names (rl/rl_step.cpp). The names on both sides are the mapping
of docs/engines.md ("verl's metrics"); a figure verl does not log is left out, never invented."""
from __future__ import annotations

import json

# verl metric -> the `rl` object's field, as the native engine names it.
RL_FIGURES = {
    "critic/score/mean": "rewardMean",
    "response_length/mean": "completionLengthMean",
    "response_length/min": "completionLengthMin",
    "response_length/max": "completionLengthMax",
    "response_length/clip_ratio": "truncatedShare",
    "actor/entropy": "entropy",
    "actor/kl_loss": "kl",
    "actor/pg_clipfrac": "clipRatio",
    "timing_s/gen": "generationSeconds",
    "timing_s/reward": "rewardSeconds",
    "timing_s/old_log_prob": "oldLogprobSeconds",
    "timing_s/update_actor": "actorUpdateSeconds",
}


def parse_line(line: str) -> tuple[int, dict] | None:
    """One line of verl's file logger as (step, metrics); None for a blank line."""
    line = line.strip()
    if not line:
        return None
    doc = json.loads(line)
    if not isinstance(doc, dict) or not isinstance(doc.get("step"), int) or not isinstance(doc.get("data"), dict):
        raise ValueError(f"not a verl file-logger line: {line[:200]}")
    return doc["step"], doc["data"]


def step_event(verl_step: int, data: dict, *, total_steps: int, iterations: int, rows: int,
               prompts_per_step: int, rewards: list[float] | None = None) -> dict:
    """The `step` event's fields for verl's training step `verl_step` (1-based: one generation batch,
    `iterations` optimizer updates). `rewards`: the batch's per-completion rewards as the job's
    graders scored them (the reward relay), which verl itself does not log."""
    num = lambda k: float(data[k]) if isinstance(data.get(k), (int, float)) else 0.0  # noqa: E731
    step = verl_step * iterations
    seconds = num("timing_s/step")
    tokens = int(num("perf/total_num_tokens"))
    rl = {ours: float(data[theirs]) for theirs, ours in RL_FIGURES.items() if isinstance(data.get(theirs), (int, float))}
    rl["completionsScored"] = len(rewards) if rewards is not None else 0
    if rewards:
        n = len(rewards)
        mean = sum(rewards) / n
        rl["rewards"] = rewards
        rl["rewardStd"] = (sum((r - mean) ** 2 for r in rewards) / (n - 1)) ** 0.5 if n > 1 else 0.0
        rl["rewardZeroShare"] = sum(1 for r in rewards if r == 0.0) / n
        rl["rewardFullShare"] = sum(1 for r in rewards if r >= 1.0) / n
    return {"step": step, "totalSteps": total_steps, "epoch": ((verl_step - 1) * prompts_per_step) // max(1, rows),
            "loss": num("actor/pg_loss"), "learningRate": num("actor/lr"), "gradNorm": num("actor/grad_norm"),
            "tokenAccuracy": 0.0, "tokensPerSecond": tokens / seconds if seconds > 0 else 0.0,
            "batchTokens": tokens, "trainedTokens": int(num("response_length/mean") * rl["completionsScored"]),
            "stepSeconds": seconds, "rl": rl}
