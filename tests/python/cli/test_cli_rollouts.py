"""A reinforcement run's rollouts and RL metrics through the product: the real `trainer` CLI
against a real trainerd running real GRPO jobs on the toy policy of rl_toy.py.

`runs rollouts` shows each generation batch's prompts, completions, rewards and the reward
terms' shares (the latest batch, `--step`, `--best`, `--worst`, `--limit` at most 200), for a
finished run and a running one, and refuses an SFT run; `runs metrics` shows an RL run's reward
and the shares of zero-spread groups and of rollouts scored zero and full, with `--fields` for kl,
memory, idle fractions and `terms:NAME`."""
from __future__ import annotations

import json
import re
import urllib.error
import urllib.request

import pytest

from cli_support import wait_for
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)  # its RL runs are waited for up to 900 s each (finished)

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "rollout-tests"
STEPS = 4
GROUP, PROMPTS = 4, 2


@pytest.fixture(scope="module")
def service(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, rows=16) as service:
        yield service


@pytest.fixture(scope="module")
def cli(service):
    return service[1]


def rl_plan(steps: int = STEPS) -> str:
    """Two weighted terms (the same scorer under two names), so each rollout's reward splits
    into two shares; two optimizer steps per generation batch."""
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {steps}, seed: 5}}",
        "  reward:", "    terms:", "      - {kind: json-label-match, name: label, weight: 0.75}",
        "      - {kind: json-label-match, name: label-again, weight: 0.25}",
        "  rlHyperparams:", f"    groupSize: {GROUP}", f"    promptsPerStep: {PROMPTS}",
        "    maxCompletionLength: 10", "    iterationsPerBatch: 2", "    microBatchSize: 8",
        "    optimizer: {learningRate: 0.006, schedule: constant}",
        "execution: {gpus: 0}"]) + "\n"


@pytest.fixture(scope="module")
def finished(cli, tmp_path_factory):
    """A GRPO run started with --wait: its id, the text it printed, and its step metrics."""
    plan = tmp_path_factory.mktemp("plans") / "rl.yaml"
    plan.write_text(rl_plan())
    out = cli("runs", "start", "-f", plan, "--force", "--wait", "--exit-status", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    return run_id, out.stdout, cli.json("runs", "metrics", run_id)["steps"]


def http_get(service, path):
    try:
        with urllib.request.urlopen(service[0].url + path, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def test_rollouts_show_the_latest_batch_with_prompts_completions_rewards_and_term_shares(cli, finished):
    run_id, _, steps = finished
    doc = cli.json("runs", "rollouts", run_id)
    # Batches begin at steps 1 and 3 (two iterations each); the latest is shown by default.
    assert doc["steps"] == [1, 3] and doc["step"] == 3
    assert doc["total"] == GROUP * PROMPTS and len(doc["rollouts"]) == GROUP * PROMPTS
    rewards = [r["reward"] for r in doc["rollouts"]]
    assert rewards == pytest.approx(steps[2]["rl"]["rewards"])
    assert steps[3]["rl"]["rewards"] == steps[2]["rl"]["rewards"]  # step 4 trains on the same batch
    assert [r["completion"] for r in doc["rollouts"]] == [r["completion"] for r in steps[2]["rl"]["rollouts"]]
    for i, r in enumerate(doc["rollouts"]):
        assert r["index"] == i and r["step"] == 3
        assert re.fullmatch(r"Ticket \d+: my (billing|shipping) issue", r["prompt"]), r["prompt"]
        assert 1 <= r["completionTokens"] <= 10
        assert [t["name"] for t in r["terms"]] == ["label", "label-again"]
        label, again = r["terms"]
        assert label["weight"] == 0.75 and again["weight"] == 0.25
        assert label["raw"] == again["raw"] and 0.0 <= label["raw"] <= 1.0
        assert label["share"] == pytest.approx(0.75 * label["raw"])
        assert label["share"] + again["share"] == pytest.approx(r["reward"])
    # A group's rollouts share its prompt.
    for g in range(PROMPTS):
        group = doc["rollouts"][g * GROUP:(g + 1) * GROUP]
        assert len({(r["promptIndex"], r["prompt"]) for r in group}) == 1


def test_rollouts_of_a_step_are_those_of_the_batch_it_trained_on(cli, finished):
    run_id, _, steps = finished
    for step in (1, 2):
        doc = cli.json("runs", "rollouts", run_id, "--step", step)
        assert doc["step"] == 1
        assert [r["reward"] for r in doc["rollouts"]] == pytest.approx(steps[0]["rl"]["rewards"])
        assert [r["completion"] for r in doc["rollouts"]] == [r["completion"] for r in steps[0]["rl"]["rollouts"]]
    out = cli("runs", "rollouts", run_id, "--step", 9)
    assert out.returncode != 0
    assert "step" in out.stderr and "no rollouts for step 9" in out.stderr and "1 to 4" in out.stderr, out.stderr


def test_best_worst_and_limit_pick_rollouts_by_reward(cli, finished):
    run_id, _, steps = finished
    all_rewards = steps[0]["rl"]["rewards"]
    best = cli.json("runs", "rollouts", run_id, "--step", 1, "--best", 3)
    assert best["order"] == "best" and best["total"] == GROUP * PROMPTS
    assert [r["reward"] for r in best["rollouts"]] == pytest.approx(sorted(all_rewards, reverse=True)[:3])
    worst = cli.json("runs", "rollouts", run_id, "--step", 1, "--worst", 2)
    assert [r["reward"] for r in worst["rollouts"]] == pytest.approx(sorted(all_rewards)[:2])
    limited = cli.json("runs", "rollouts", run_id, "--limit", 3)
    assert [r["index"] for r in limited["rollouts"]] == [0, 1, 2] and limited["total"] == GROUP * PROMPTS


def test_more_than_200_rollouts_or_best_with_worst_are_refused_by_name(cli, service, finished):
    run_id, _, _ = finished
    out = cli("runs", "rollouts", run_id, "--limit", 201)
    assert out.returncode == 2 and "--limit" in out.stderr and "200" in out.stderr, out.stderr
    out = cli("runs", "rollouts", run_id, "--best", 2, "--worst", 2)
    assert out.returncode == 2 and "--best" in out.stderr and "--worst" in out.stderr, out.stderr
    # The service refuses them too, naming the query parameter.
    code, body = http_get(service, f"/v1/runs/{run_id}/rollouts?limit=201")
    assert code == 400 and "limit" in json.dumps(body) and "200" in json.dumps(body), body
    code, body = http_get(service, f"/v1/runs/{run_id}/rollouts?best=0")
    assert code == 400 and "best" in json.dumps(body), body
    code, body = http_get(service, f"/v1/runs/{run_id}/rollouts?best=1&worst=1")
    assert code == 400 and "worst" in json.dumps(body), body


def test_rollouts_as_text_show_prompt_completion_reward_and_shares(cli, finished):
    run_id, _, _ = finished
    doc = cli.json("runs", "rollouts", run_id, "--best", 1)
    top = doc["rollouts"][0]
    out = cli("runs", "rollouts", run_id, "--best", 1, check=True).stdout
    assert f"generation batch of step {doc['step']}" in out and "the 1 best of 8 rollouts" in out, out
    assert "prompt:     " + top["prompt"] in out, out
    assert "completion: " + top["completion"].split("\n")[0] in out, out
    assert re.search(r"reward [0-9.]+\s+\[label [0-9.e-]+ \(0\.75 x [0-9.e-]+\), label-again ", out), out


def test_an_sft_run_has_no_rollouts(cli, tmp_path):
    plan = "\n".join(["kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:",
                      f"  dataset: {DATASET}", "  maxSeqLength: 64", "  model: {precision: FP32}",
                      "  hyperparams: {training: {maxSteps: 1, batchSize: 2}}", "execution: {gpus: 0}"]) + "\n"
    run = cli.json("runs", "start", "-f", "-", "--force", input=plan)
    out = cli("runs", "rollouts", run["runId"])
    assert out.returncode != 0
    assert "supervised" in out.stderr and "grpo and gspo" in out.stderr, out.stderr


def test_a_running_run_shows_the_rollouts_of_its_steps_so_far(cli):
    run = cli.json("runs", "start", "-f", "-", "--force", input=rl_plan(steps=400))
    run_id = run["runId"]
    try:
        wait_for(lambda: cli.json("runs", "get", run_id)["progress"].get("step", 0) >= 3, what="step 3")
        doc = cli.json("runs", "rollouts", run_id)
        assert doc["phase"] == "TRAINING", doc["phase"]
        assert doc["step"] >= 3 and doc["steps"][:2] == [1, 3]
        assert len(doc["rollouts"]) == GROUP * PROMPTS and all(r["prompt"] for r in doc["rollouts"])
        # The progress line and record of a reinforcement run show its reward, not its loss.
        got = cli.json("runs", "get", run_id)
        assert "reward" in got["latest"]
        text = cli("runs", "get", run_id, check=True).stdout
        assert re.search(r"Reward\s*:?\s+[0-9.]+", text), text
    finally:
        cli("runs", "cancel", run_id, "--force")


def test_a_finished_rl_run_started_with_wait_reports_its_reward(finished):
    _, printed, steps = finished
    assert f"COMPLETED after {STEPS}/{STEPS} steps" in printed, printed
    assert re.search(r"final reward:\s+[0-9.]+", printed) and "final loss" not in printed, printed


def test_rl_metrics_show_reward_and_the_zero_spread_zero_and_full_shares(cli, finished):
    run_id, _, steps = finished
    out = cli("runs", "metrics", run_id, check=True).stdout
    header = out.splitlines()[0]
    for column in ("STEP", "REWARD", "ZERO-SPREAD GROUPS", "SCORED 0", "SCORED 1"):
        assert column in header, header
    assert "LOSS" not in header, header
    assert len(out.splitlines()) == 1 + STEPS
    for s in steps:
        rl = s["rl"]
        assert s["reward"] == rl["rewardMean"] and s["zeroSpreadGroupShare"] == rl["zeroStdGroupShare"]
        assert s["zeroRewardShare"] == rl["rewardZeroShare"] and s["fullRewardShare"] == rl["rewardFullShare"]
        assert s["rewardTerms"]["label"] == pytest.approx(0.75 / 0.25 * s["rewardTerms"]["label-again"])
        assert s["rewardTerms"]["total"] == s["reward"]
        assert s["measured"]["entropy"] == rl["entropy"] and "kl" in s
        assert 0.0 <= s["trainerIdle"] <= 1.0 and 0.0 <= s["rolloutIdle"] <= 1.0
    # Generation steps (1, 3) wait on generation; the steps reusing a batch (2, 4) do not.
    assert steps[0]["trainerIdle"] > 0 and steps[1]["trainerIdle"] == 0 and steps[1]["rolloutIdle"] == 1


def test_rl_metrics_fields_take_kl_memory_idle_fractions_and_terms(cli, finished):
    run_id, _, steps = finished
    fields = "kl,maxMemoryGb,trainerIdle,rolloutIdle,terms:label,terms:total,entropy"
    out = cli("runs", "metrics", run_id, "--fields", fields, check=True).stdout
    lines = out.splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    for column in ("KL", "MAXMEMORYGB", "TRAINERIDLE", "ROLLOUTIDLE", "LABEL", "TOTAL", "ENTROPY"):
        assert column in header, header
    row = re.split(r"\s{2,}", lines[1].strip())
    assert float(row[header.index("TOTAL")]) == pytest.approx(steps[0]["reward"], abs=1e-3)
    assert float(row[header.index("REWARD")]) == pytest.approx(steps[0]["reward"], abs=1e-3)
    assert float(row[header.index("MAXMEMORYGB")]) > 0
    out = cli("runs", "metrics", run_id, "--fields", "terms:labl")
    assert out.returncode == 2 and "terms:labl" in out.stderr, out.stderr
    assert "did you mean terms:label" in out.stderr and "terms:label-again" in out.stderr, out.stderr


def test_the_runs_tensorboard_files_carry_the_rl_figures_reward_terms_and_rollouts(cli, finished, tmp_path):
    """The GRPO run's event file (docs/tensorboard.md), mirrored by `runs tensorboard --sync-only`
    and read by TensorBoard's own reader: each step's RL figures as `runs metrics` shows them, each
    reward term's mean, and a few rollouts as text."""
    import numpy as np
    from tensorboard.backend.event_processing import event_accumulator

    run_id, _, steps = finished
    cli("runs", "tensorboard", run_id, "--dir", tmp_path, "--sync-only", check=True)
    acc = event_accumulator.EventAccumulator(str(tmp_path / run_id[:12]),
                                             size_guidance={event_accumulator.SCALARS: 0,
                                                            event_accumulator.TENSORS: 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    assert {"rl/rewardMean", "rl/kl", "rl/entropy", "rl/clipRatio", "rl/completionLengthMean",
            "rl/reward/label", "rl/reward/label-again", "train/loss"} <= tags, tags
    for tag, key in (("rl/rewardMean", "rewardMean"), ("rl/kl", "kl"), ("rl/completionLengthMean", "completionLengthMean")):
        board = [(e.step, e.value) for e in acc.Scalars(tag)]
        assert board == [(s["step"], float(np.float32(s["rl"][key]))) for s in steps], tag
    assert "rl/rollouts" in acc.Tags()["tensors"]
    first = acc.Tensors("rl/rollouts")[0]
    text = first.tensor_proto.string_val[0].decode()
    assert first.step == 1 and "reward" in text and "**prompt" in text, text
    assert acc.SummaryMetadata("rl/rollouts").plugin_data.plugin_name == "text"
