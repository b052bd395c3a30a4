"""GRPO and GSPO through `trainer-job run` on a tiny random model: the run completes with an
adapter, every step event carries the RL figures (rewards by term, completion lengths within
the budget, clip ratios, KL, phase seconds, rollouts), the same seed gives the same rollouts,
and bad RL rows are refused naming the file, line and field."""
import json

import pytest

from engine_helpers import write_jsonl

LABELS = ["billing", "shipping", "refund", "account"]


def rl_rows(n):
    return [{"messages": [{"role": "user", "content": f"Classify ticket {i}: my {LABELS[i % 4]} issue"},
                          {"role": "assistant", "content": json.dumps({"label": LABELS[i % 4]})}]} for i in range(n)]


def rl_plan(model_dir, data, method="grpo", **rl):
    hp = {"groupSize": 4, "promptsPerStep": 2, "maxCompletionLength": 12, "temperature": 1.0, "microBatchSize": 4,
          "optimizer": {"learningRate": 0.01}}
    hp.update(rl)
    return {"kind": "run", "workload": "engine-test", "baseModel": str(model_dir),
            "config": {"dataset": str(data), "method": method, "maxSeqLength": 96, "model": {"precision": "FP32"},
                       "hyperparams": {"lora": {"rank": 4}, "training": {"maxSteps": 3, "seed": 5}},
                       "klBeta": 0.05, "reward": {"terms": [{"kind": "json-label-match", "weight": 1.0}]},
                       "rlHyperparams": hp},
            "execution": {"gpus": 0}}


def run_plan(job, tmp_path, name, plan):
    plan_path = tmp_path / f"{name}.json"
    plan_path.write_text(json.dumps(plan))
    events_path = tmp_path / f"{name}.events"
    proc = job("run", "--plan", plan_path, "--output", tmp_path / name, "--events", events_path, check=False)
    events = [json.loads(line) for line in events_path.read_text().splitlines()] if events_path.exists() else []
    return proc, events


def check_useful_flops(model_dir, steps, rank, group):
    """Each step's usefulFlops is the documented formula (docs/telemetry-usage.md, "Useful FLOPs")
    for its batch: every row (prompt and completion) forward and backward through the frozen
    base and the adapters (r `rank` on the 7 projections), causal attention over each row, the
    head at the completion positions. The events give the completion lengths and the prompts'
    total; the one split of it between the batch's two prompts (rows of `group`) must match."""
    cfg = json.loads((model_dir / "config.json").read_text())
    h, i, layers, vocab = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    q, kv = cfg["num_attention_heads"] * cfg["head_dim"], cfg["num_key_value_heads"] * cfg["head_dim"]
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]  # (in, out) of q k v o gate up down
    base = layers * sum(a * b for a, b in shapes)
    adapters = layers * sum(rank * (a + b) for a, b in shapes)
    for s in steps:
        completions = s["rl"]["completionLengths"]
        tokens = s["batchTokens"]
        prompts = tokens - sum(completions)  # both prompts, each `group` times
        assert len(completions) == 2 * group and prompts % group == 0
        rest = s["usefulFlops"] - (4 * base + 6 * adapters) * tokens - 4 * h * vocab * sum(completions)
        splits = []
        for first in range(1, prompts // group):
            lengths = [(first if r < group else prompts // group - first) + c for r, c in enumerate(completions)]
            if 12 * layers * q * sum(n * (n + 1) // 2 for n in lengths) == pytest.approx(rest, rel=1e-12):
                splits.append(first)
        assert splits, f"step {s['step']}: usefulFlops {s['usefulFlops']} fits no split of the prompts' {prompts} tokens"


@pytest.mark.parametrize("method", ["grpo", "gspo"])
def test_rl_run_completes_with_rl_figures_in_every_step(method, tiny_models, job, tmp_path):
    data = write_jsonl(tmp_path / "rl.jsonl", rl_rows(8))
    plan = rl_plan(tiny_models("qwen3"), data, method=method, iterationsPerBatch=2)
    proc, events = run_plan(job, tmp_path, "a", plan)
    assert proc.returncode == 0, proc.stderr
    steps = [e for e in events if e["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3]
    resolved = next(e for e in events if e["type"] == "resolved")
    assert resolved["config"]["method"] == method
    assert resolved["config"]["rlHyperparams"]["lossAggregation"] == "dapo"
    for s in steps:
        rl = s["rl"]
        assert rl["completionsScored"] == 8
        assert len(rl["completionLengths"]) == 8 and all(1 <= n <= 12 for n in rl["completionLengths"])
        assert rl["completionLengthMin"] <= rl["completionLengthMean"] <= rl["completionLengthMax"]
        assert [t["name"] for t in rl["terms"]] == ["json-label-match"]
        assert 0.0 <= rl["rewardMean"] <= 1.0 and 0.0 <= rl["rewardZeroShare"] <= 1.0
        assert 0.0 <= rl["clipRatio"] <= 1.0 and rl["kl"] >= 0.0
        assert rl["entropy"] > 0
        assert len(rl["rollouts"]) == 8
    check_useful_flops(tiny_models("qwen3"), steps, rank=4, group=4)
    # A generation batch serves iterationsPerBatch=2 steps: step 2 reuses step 1's rollouts.
    assert steps[0]["rl"]["generationSeconds"] > 0 and steps[1]["rl"]["generationSeconds"] == 0
    assert steps[1]["rl"]["rollouts"] == steps[0]["rl"]["rollouts"]
    assert steps[1]["usefulFlops"] == steps[0]["usefulFlops"]  # the same update over the same rollouts
    assert steps[2]["rl"]["generationSeconds"] > 0
    done = events[-1]
    assert done["type"] == "completed" and done["steps"] == 3
    assert (tmp_path / "a" / "adapter" / "adapter_model.safetensors").exists()
    # The same seed gives the same rollouts.
    proc2, events2 = run_plan(job, tmp_path, "b", plan)
    assert proc2.returncode == 0, proc2.stderr
    steps2 = [e for e in events2 if e["type"] == "step"]
    assert [s["rl"]["rollouts"] for s in steps2] == [s["rl"]["rollouts"] for s in steps]


def test_rl_rows_without_a_gold_answer_are_refused_by_line(tiny_models, job, tmp_path):
    rows = rl_rows(3)
    rows[1]["messages"] = rows[1]["messages"][:1]
    data = write_jsonl(tmp_path / "bad.jsonl", rows)
    proc, events = run_plan(job, tmp_path, "bad", rl_plan(tiny_models("qwen3"), data))
    assert proc.returncode != 0
    assert "bad.jsonl:2" in proc.stderr and "gold answer" in proc.stderr, proc.stderr


def test_grpo_raises_the_mean_reward_on_a_toy_task_reproducibly(tmp_path_factory, job, tmp_path):
    """On the toy task of rl_toy.py (a tiny model that answers JSON with a label drawn by chance),
    GRPO with json-label-match lifts the mean reward clearly in 24 steps on the CPU, and the same
    seed gives the same rewards (a second, shorter run repeats the first one's opening steps:
    the constant schedule makes the learning rate independent of the step count)."""
    from rl_toy import make_toy_policy, toy_rows  # tests/python/rl_toy.py

    model = make_toy_policy(tmp_path_factory.mktemp("toy-policy"))
    data = write_jsonl(tmp_path / "toy.jsonl", toy_rows(32))
    plan = {"kind": "run", "workload": "engine-test", "baseModel": str(model),
            "config": {"dataset": str(data), "method": "grpo", "maxSeqLength": 64, "model": {"precision": "FP32"},
                       "hyperparams": {"lora": {"rank": 8, "alpha": 16}, "training": {"maxSteps": 24, "seed": 3}},
                       "reward": {"terms": [{"kind": "json-label-match"}]},
                       "rlHyperparams": {"groupSize": 8, "promptsPerStep": 4, "maxCompletionLength": 10,
                                         "microBatchSize": 32,
                                         "optimizer": {"learningRate": 6e-3, "schedule": "constant"}}},
            "execution": {"gpus": 0}}
    proc, events = run_plan(job, tmp_path, "toy", plan)
    assert proc.returncode == 0, proc.stderr
    rewards = [s["rl"]["rewardMean"] for s in events if s["type"] == "step"]
    assert len(rewards) == 24
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last >= first + 0.2 and last >= 0.5, rewards

    plan["config"]["hyperparams"]["training"]["maxSteps"] = 4
    proc, again = run_plan(job, tmp_path, "toy-again", plan)
    assert proc.returncode == 0, proc.stderr
    steps = [s for s in events if s["type"] == "step"][:4]
    steps_again = [s for s in again if s["type"] == "step"]
    assert [s["rl"]["rewards"] for s in steps_again] == [s["rl"]["rewards"] for s in steps]
    assert [s["rl"]["rollouts"] for s in steps_again] == [s["rl"]["rollouts"] for s in steps]
