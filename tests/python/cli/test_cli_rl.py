"""A GRPO run through the product: the real `trainer` CLI against a real trainerd, which accepts
the RL plan (its defaults shown by --dry-run --show-resolved), runs the real job and records
every step's RL figures; on the toy task of rl_toy.py the mean reward rises; paused and resumed,
the run trains exactly as uninterrupted."""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from cli_support import wait_for
from toy_rl_service import toy_rl_service

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "rl-tests"
STEPS = 24


@pytest.fixture(scope="module")
def rl_cli(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD) as (_, cli):
        yield cli


def rl_plan(steps: int = STEPS) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {steps}, seed: 3}}",
        "  reward: {terms: [{kind: json-label-match}]}",
        "  rlHyperparams:", "    groupSize: 8", "    promptsPerStep: 4", "    maxCompletionLength: 10",
        "    microBatchSize: 32", "    optimizer: {learningRate: 0.006, schedule: constant}",
        "execution: {gpus: 0}"]) + "\n"


def test_the_service_shows_an_rl_plans_defaults(rl_cli):
    resolved = rl_cli.json("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=rl_plan())["plan"]
    config = resolved["config"]
    assert config["method"] == "grpo" and config["klBeta"] == 0.0
    hp = config["rlHyperparams"]
    assert hp["lossAggregation"] == "dapo" and hp["scaleRewards"] == "group" and hp["iterationsPerBatch"] == 1
    assert hp["clipLow"] == 0.2 and hp["topP"] == 1.0 and hp["optimizer"]["learningRate"] == 0.006
    # An SFT-only field on an RL plan is refused by name.
    bad = rl_plan().replace("    lora: {rank: 8, alpha: 16}", "    lora: {rank: 8, alpha: 16}\n    optimizer: {learningRate: 0.1}")
    out = rl_cli("runs", "start", "-f", "-", "--dry-run", input=bad)
    assert out.returncode != 0 and "config.hyperparams.optimizer" in out.stderr, out.stdout + out.stderr


@pytest.fixture(scope="module")
def completed(rl_cli, tmp_path_factory):
    """A GRPO run started with --wait: its record and step metrics."""
    plan = tmp_path_factory.mktemp("plans") / "rl.yaml"
    plan.write_text(rl_plan())
    out = rl_cli("runs", "start", "-f", plan, "--force", "--wait", "--exit-status", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    assert re.search(rf"Run [0-9a-f]+ COMPLETED after {STEPS}/{STEPS} steps", out.stdout), out.stdout
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    return rl_cli.json("runs", "get", run_id), rl_cli.json("runs", "metrics", run_id)["steps"]


def test_a_grpo_run_started_with_wait_raises_the_reward(completed):
    _, steps = completed
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    rewards = [s["rl"]["rewardMean"] for s in steps]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last >= first + 0.2 and last >= 0.5, rewards


def test_a_grpo_run_paused_and_resumed_trains_exactly_as_uninterrupted(rl_cli, completed):
    """Pause (save) after step 5 and resume: the prompt order's position and the optimizer come
    back from the training state, so every step's rewards and loss, and the final adapter, are
    those of the uninterrupted run (fp32 on the CPU, bit for bit)."""
    ref_run, ref_steps = completed
    out = rl_cli("runs", "start", "-f", "-", "--force", "-o", "json", input=rl_plan())
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout)["runId"]

    get = lambda: rl_cli.json("runs", "get", run_id)
    wait_for(lambda: get()["progress"].get("step", 0) >= 5, what="step 5")
    out = rl_cli("runs", "pause", run_id, "--checkpoint", "save")
    assert out.returncode == 0, out.stdout + out.stderr
    run = wait_for(lambda: (r := get())["phase"] == "PAUSED" and r["pause"]["resourcesReleased"] and r, what="PAUSED")
    assert 5 <= run["pause"]["savedStep"] < STEPS
    rl_cli("runs", "resume", run_id, check=True)
    done = wait_for(lambda: (r := get())["phase"] in ("COMPLETED", "FAILED") and r, what="the end")
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    steps = rl_cli.json("runs", "metrics", run_id)["steps"]
    assert [s["step"] for s in steps] == list(range(1, STEPS + 1))
    assert [s["rl"]["rewards"] for s in steps] == [s["rl"]["rewards"] for s in ref_steps]
    assert [s["loss"] for s in steps] == [s["loss"] for s in ref_steps]
    adapter = lambda r: (pathlib.Path(r["adapterPath"]) / "adapter_model.safetensors").read_bytes()
    assert adapter(done) == adapter(ref_run)


def test_a_grpo_run_passes_its_smoke_check_and_trains_exactly_as_without_it(rl_cli):
    """The plan's smoke check on a GRPO plan: rollouts scored and trained on the first rows, a
    checkpoint restored and its step trained again to a finite loss; then the run trains the same
    steps as the same plan without the check."""
    def run(plan: str) -> tuple[dict, list]:
        out = rl_cli("runs", "start", "-f", "-", "--force", "--wait", "--exit-status", input=plan, timeout=900)
        assert out.returncode == 0, out.stdout + out.stderr
        run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
        return rl_cli.json("runs", "get", run_id), rl_cli.json("runs", "metrics", run_id)["steps"]

    reference, reference_steps = run(rl_plan(4))
    checked, steps = run(rl_plan(4) + "smoke: {steps: 2, rows: 8}\n")
    smoke = checked["smoke"]
    assert (smoke["verdict"], smoke["steps"], smoke["rows"]) == ("passed", 2, 8), smoke
    assert smoke["restoredLoss"] is not None and smoke["loss"] is not None, smoke
    assert "smoke" not in reference
    assert [(s["step"], s["loss"], s["rl"]["rewardMean"]) for s in steps] == \
        [(s["step"], s["loss"], s["rl"]["rewardMean"]) for s in reference_steps]
