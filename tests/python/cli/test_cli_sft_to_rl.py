"""SFT, then RL, through the product: the real `trainer` CLI against a real trainerd running the real
jobs (docs/rl.md, "SFT, then RL"). An SFT run of the toy policy (with a validation set, an
optimizer and batch sizes of its own), then `runs branch --method grpo` of its final snapshot with
an override document naming the grader: the SFT fields the child inherits are dropped and listed
in the CLI's words, the child completes as a GRPO run, and it started from the SFT snapshot's
weights. A method change restoring trainingState, and one that names no reward, are refused by
name and start nothing; the child and its lineage show both methods."""
from __future__ import annotations

import json
import pathlib
import re
import time

import pytest

from cli_support import count_runs, ended
from rl_toy import toy_rows
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1500)

MODEL = "toy-policy"
DATASET = "toy-tickets"
VALIDATION = "toy-tickets-held-out"
WORKLOAD = "sft-then-rl"
SFT_STEPS = 4
RL_STEPS = 3

SFT_PLAN = "\n".join([
    "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
    f"  validationDataset: {VALIDATION}", "  method: sft", "  maxSeqLength: 64", "  model: {precision: FP32}",
    "  hyperparams:", "    lora: {rank: 8, alpha: 16}",
    "    optimizer: {learningRate: 0.003, schedule: constant}",
    f"    training: {{maxSteps: {SFT_STEPS}, batchSize: 4, seed: 3}}",
    "execution: {gpus: 0}"]) + "\n"

# A few tiny groups: the CPU test's RL budget.
RL_HYPERPARAMS = ("rlHyperparams: {groupSize: 4, promptsPerStep: 2, maxCompletionLength: 10, microBatchSize: 8, "
                  "optimizer: {learningRate: 0.006, schedule: constant}}\n")
GRADER = "reward: {terms: [{kind: json-label-match, weight: 1}]}\n" + RL_HYPERPARAMS
# The same child with a reward that is always 0: every advantage is 0, so its one update moves
# nothing and its final adapter is the adapter it started from.
NO_SIGNAL = "reward: {terms: [{kind: json-label-match, weight: 0}]}\n" + RL_HYPERPARAMS

SFT_DROPPED = ("dropped config.validationDataset, config.hyperparams.optimizer, "
               "config.hyperparams.training.batchSize, config.hyperparams.training.gradientAccumulation, "
               "config.hyperparams.training.validationFrequencySteps, config.hyperparams.training.validationSplit, "
               "config.hyperparams.training.packing: SFT fields a grpo run does not have")


@pytest.fixture(scope="module")
def rl_cli(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD) as (_, cli):
        held_out = tmp_path_factory.mktemp("data") / "held-out.jsonl"
        held_out.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(8, offset=500)))
        cli("datasets", "create", "-f", held_out, "--name", VALIDATION, check=True)
        yield cli


@pytest.fixture(scope="module")
def sft(rl_cli, tmp_path_factory):
    """The completed SFT parent and its final snapshot (weights and training state)."""
    plan = tmp_path_factory.mktemp("plans") / "sft.yaml"
    plan.write_text(SFT_PLAN)
    out = rl_cli("runs", "start", "-f", plan, "--force", "--wait", "--exit-status", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    run = rl_cli.json("runs", "get", run_id)
    assert run["method"] == "sft" and run["phase"] == "COMPLETED"
    snapshot = next(s for s in rl_cli.json("runs", "snapshots", run_id)["snapshots"] if s["savedStep"] == SFT_STEPS)
    return run, snapshot


def overrides(tmp_path: pathlib.Path, text: str) -> pathlib.Path:
    path = tmp_path / "rl.yaml"
    path.write_text(text)
    return path


def branch(cli, sft, *args, **kw):
    run, snapshot = sft
    return cli("runs", "branch", run["runId"][:8], "--snapshot", snapshot["snapshotId"][:12], *args, **kw)


def adapter_tensors(run: dict) -> dict:
    from safetensors.torch import load_file
    return load_file(str(pathlib.Path(run["adapterPath"]) / "adapter_model.safetensors"))


@pytest.fixture(scope="module")
def grpo_child(rl_cli, sft, tmp_path_factory):
    """`runs branch --method grpo` of the SFT run's final snapshot, followed to its end."""
    rl = overrides(tmp_path_factory.mktemp("overrides"), GRADER)
    out = branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "grpo", "--overrides", rl, "--wait", "--exit-status",
                 timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    return rl_cli.json("runs", "get", run_id), out.stdout


def test_the_dry_run_lists_the_sft_fields_it_drops_and_shows_a_grpo_plan(rl_cli, sft, tmp_path):
    before = count_runs(rl_cli)
    out = branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "grpo", "--overrides", overrides(tmp_path, GRADER),
                 "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Method: sft -> grpo; {SFT_DROPPED}." in out.stdout, out.stdout
    assert "restoring weights" in out.stdout and "Nothing was started" in out.stdout
    answer = json.loads(branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "grpo", "--overrides",
                               overrides(tmp_path, GRADER), "--dry-run", "-o", "json", check=True).stdout)
    config = answer["plan"]["config"]
    assert config["method"] == "grpo" and "validationDataset" not in config
    assert "optimizer" not in config["hyperparams"] and "batchSize" not in config["hyperparams"]["training"]
    assert config["reward"]["terms"][0]["kind"] == "json-label-match"
    assert config["rlHyperparams"]["groupSize"] == 4 and config["rlHyperparams"]["clipLow"] == 0.2  # defaults resolved
    assert config["hyperparams"]["lora"] == sft[0]["plan"]["config"]["hyperparams"]["lora"]
    change = answer["child"]["methodChange"]
    assert change["from"] == "sft" and change["to"] == "grpo" and change["dropped"][0] == "config.validationDataset"
    assert answer["child"]["parentMethod"] == "sft"
    # An override document setting the method does the same as --method.
    same = json.loads(branch(rl_cli, sft, "--steps", RL_STEPS, "--overrides",
                             overrides(tmp_path, "method: grpo\n" + GRADER), "--dry-run", "-o", "json",
                             check=True).stdout)
    assert same["plan"] == answer["plan"] and same["child"]["methodChange"] == change
    assert count_runs(rl_cli) == before


def test_the_sft_snapshot_branched_with_method_grpo_completes_as_grpo(rl_cli, sft, grpo_child):
    child, said = grpo_child
    assert f"Method: sft -> grpo; {SFT_DROPPED}." in said, said
    assert child["phase"] == "COMPLETED", child.get("failureReason")
    assert child["method"] == "grpo" and child["parentMethod"] == "sft" and child["restore"] == "weights"
    assert child["parentRunId"] == sft[0]["runId"] and child["sourceSnapshotId"] == sft[1]["snapshotId"]
    steps = rl_cli.json("runs", "metrics", child["runId"])["steps"]
    assert [s["step"] for s in steps] == list(range(1, RL_STEPS + 1))
    assert all(len(s["rl"]["rewards"]) == 4 * 2 for s in steps)  # groupSize x promptsPerStep, scored


def test_the_grpo_childs_first_step_policy_is_the_sft_snapshots_weights(rl_cli, sft, grpo_child, tmp_path):
    """Two honest halves. (1) A twin child whose reward is always 0 cannot move its adapter (every
    advantage is 0, and so every gradient and AdamW update): its final adapter is the adapter it
    restored, and it equals the SFT snapshot's, tensor for tensor, bit for bit. (2) Its step-1
    rollouts, sampled with the same seed from that adapter, are the GRPO child's step-1 rollouts:
    the GRPO child sampled its first step from the SFT snapshot's weights."""
    parent, _ = sft
    child, _ = grpo_child
    out = branch(rl_cli, sft, "--steps", 1, "--method", "grpo", "--overrides", overrides(tmp_path, NO_SIGNAL),
                 "-o", "json")
    assert out.returncode == 0, out.stdout + out.stderr
    twin = ended(rl_cli, json.loads(out.stdout)["runId"])
    assert twin["phase"] == "COMPLETED", twin.get("failureReason")

    restored, trained = adapter_tensors(twin), adapter_tensors(parent)
    assert sorted(restored) == sorted(trained)
    for name, tensor in trained.items():
        assert restored[name].dtype == tensor.dtype and bool((restored[name] == tensor).all()), name
    # The SFT run trained the adapter: it is not the fresh one (LoRA's B starts at zero).
    assert any(bool(t.abs().max() > 0) for n, t in trained.items() if "lora_B" in n)

    first = lambda run_id: [(r["promptIndex"], r["completion"])
                            for r in rl_cli.json("runs", "rollouts", run_id, "--step", 1, "--limit", 200)["rollouts"]]
    assert first(twin["runId"]) == first(child["runId"])
    assert len(first(child["runId"])) == 4 * 2


def test_a_method_change_restoring_training_state_is_refused_by_name(rl_cli, sft, tmp_path):
    before = count_runs(rl_cli)
    out = branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "grpo", "--restore", "trainingState",
                 "--overrides", overrides(tmp_path, GRADER))
    assert out.returncode != 0
    assert "restore" in out.stderr and "trainingState is refused: the child changes method from sft to grpo" in out.stderr, \
        out.stderr
    assert "cannot seed a grpo run" in out.stderr, out.stderr
    # runs continue always restores the training state: it names the method and says what to run instead.
    out = rl_cli("runs", "continue", sft[0]["runId"], "--steps", RL_STEPS, "--overrides",
                 overrides(tmp_path, "method: grpo\n" + GRADER))
    assert out.returncode != 0
    assert "overrides.method" in out.stderr and "--method grpo" in out.stderr, out.stderr
    assert count_runs(rl_cli) == before


def test_a_method_change_without_a_reward_names_it_and_shows_an_example(rl_cli, sft, tmp_path):
    before = count_runs(rl_cli)
    out = branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "gspo", "--overrides", overrides(tmp_path, RL_HYPERPARAMS))
    assert out.returncode != 0
    assert "overrides.reward.terms" in out.stderr, out.stderr
    assert "required: the child changes method from sft to gspo" in out.stderr, out.stderr
    assert "reward:\n  terms:\n    - {kind: json-label-match" in out.stderr, out.stderr  # the example document
    # --method and an override document naming another method disagree.
    out = branch(rl_cli, sft, "--steps", RL_STEPS, "--method", "gspo", "--overrides",
                 overrides(tmp_path, "method: grpo\n" + GRADER))
    assert out.returncode != 0 and "disagree" in out.stderr, out.stderr
    assert count_runs(rl_cli) == before


def test_the_child_and_its_lineage_show_both_methods(rl_cli, sft, grpo_child, tmp_path):
    parent, _ = sft
    child, _ = grpo_child
    shown = rl_cli("runs", "get", child["runId"], check=True).stdout
    assert re.search(rf"Parent:\s+run {parent['runId'][:8]}[0-9a-f]* \(sft\), branch from snapshot", shown), shown
    assert "sft -> grpo; dropped config.validationDataset" in shown, shown
    chain = rl_cli.json("runs", "ancestry", child["runId"])["runs"]
    assert [(r["runId"], r["method"]) for r in chain] == [(parent["runId"], "sft"), (child["runId"], "grpo")]
    assert chain[1]["parentMethod"] == "sft" and chain[1]["methodChange"]["to"] == "grpo"
    assert "grpo (from sft)" in rl_cli("runs", "ancestry", child["runId"], check=True).stdout
    assert "grpo (from sft)" in rl_cli("runs", "branches", parent["runId"], check=True).stdout
    # And back: an RL snapshot branched into SFT drops the RL fields.
    snap = next(s for s in rl_cli.json("runs", "snapshots", child["runId"])["snapshots"] if s["savedStep"] == RL_STEPS)
    out = rl_cli("runs", "branch", child["runId"], "--snapshot", snap["snapshotId"], "--steps", 2, "--method", "sft",
                 "--dry-run")
    assert out.returncode == 0, out.stdout + out.stderr
    assert ("Method: grpo -> sft; dropped config.reward, config.klBeta, config.rlHyperparams: "
            "reinforcement-learning fields an sft run does not have.") in out.stdout, out.stdout


# ---- warm starts: a plan's warmStartModelId (or source.model) names the registered SFT adapter ----

def registered_model(cli, run: dict) -> str:
    """The model the completed run registered, once REGISTERED."""
    model_id = run["modelId"]
    deadline = time.monotonic() + 120
    while cli.json("trained-models", "get", model_id)["status"] != "REGISTERED":
        assert time.monotonic() < deadline, cli.json("trained-models", "get", model_id)
        time.sleep(0.2)
    return model_id


def warm_plan(child: dict, model_id: str | None, **changes) -> str:
    """The GRPO child's resolved plan as a plan of its own, warm-started from `model_id`."""
    plan = json.loads(json.dumps(child["plan"]))
    plan.pop("submissionId", None)
    if model_id:
        plan["warmStartModelId"] = model_id
    for path, value in changes.items():
        node = plan
        *parents, leaf = path.split(".")
        for key in parents:
            node = node[key]
        node[leaf] = value
    return json.dumps(plan)


def start_plan(cli, text: str, *flags):
    return cli("runs", "start", "-f", "-", "--force", "-o", "json", *flags, input=text)


def test_a_grpo_run_warm_started_from_the_sft_model_starts_from_its_weights(rl_cli, sft, grpo_child):
    """A plain GRPO plan naming the SFT run's registered model: its step-1 rollouts are the GRPO child's
    (that branch started from the same weights with the same seed); a twin whose reward is always 0
    ends with the SFT adapter itself, tensor for tensor; `runs get` says where it started."""
    parent, _ = sft
    child, _ = grpo_child
    model_id = registered_model(rl_cli, parent)
    out = start_plan(rl_cli, warm_plan(child, model_id[:10]))
    assert out.returncode == 0, out.stderr
    warm = ended(rl_cli, json.loads(out.stdout)["runId"])
    assert warm["phase"] == "COMPLETED", warm.get("failureReason")
    assert warm["plan"]["warmStartModelId"] == model_id and warm["warmStart"]["modelId"] == model_id
    assert not warm.get("parentRunId")  # a warm start is not a child run
    first = lambda run_id: [(r["promptIndex"], r["completion"])
                            for r in rl_cli.json("runs", "rollouts", run_id, "--step", 1, "--limit", 200)["rollouts"]]
    assert first(warm["runId"]) == first(child["runId"])
    shown = rl_cli("runs", "get", warm["runId"], check=True).stdout
    assert re.search(rf"Warm start:\s+model {model_id[:8]}[0-9a-f]* \(trained by run {parent['runId'][:8]}", shown), shown
    # The lineage follows the weights: the SFT run, then the run warm-started from its model.
    chain = rl_cli.json("runs", "ancestry", warm["runId"])["runs"]
    assert [r["runId"] for r in chain] == [parent["runId"], warm["runId"]]
    assert chain[1]["warmStart"]["modelId"] == model_id and "warmStart" not in chain[0]
    table = rl_cli("runs", "ancestry", warm["runId"], check=True).stdout
    assert f"warm start from model {model_id[:8]}" in table, table
    assert warm["runId"] not in json.dumps(rl_cli.json("runs", "branches", parent["runId"]))

    text = warm_plan(child, model_id, **{"config.reward.terms": [{"kind": "json-label-match", "weight": 0}],
                                         "config.hyperparams.training.maxSteps": 1})
    out = start_plan(rl_cli, text)
    assert out.returncode == 0, out.stderr
    twin = ended(rl_cli, json.loads(out.stdout)["runId"])
    assert twin["phase"] == "COMPLETED", twin.get("failureReason")
    restored, trained = adapter_tensors(twin), adapter_tensors(parent)
    assert sorted(restored) == sorted(trained)
    for name, tensor in trained.items():
        assert bool((restored[name] == tensor).all()), name


def test_source_model_is_the_newer_spelling_of_warm_start_model_id(rl_cli, sft, grpo_child):
    child, _ = grpo_child
    model_id = registered_model(rl_cli, sft[0])
    plan = json.loads(warm_plan(child, None))
    plan["source"] = {"model": model_id[:12]}
    out = start_plan(rl_cli, json.dumps(plan), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["warmStartModelId"] == model_id
    plan["warmStartModelId"] = "0123abcd"
    out = start_plan(rl_cli, json.dumps(plan), "--dry-run")
    assert out.returncode != 0 and "source.model" in out.stderr and "give one of the two" in out.stderr, out.stderr


@pytest.mark.parametrize("change, words", [
    ({"config.hyperparams.lora.rank": 4}, "has LoRA rank 8, the plan's config.hyperparams.lora.rank is 4"),
    ({"config.hyperparams.lora.alpha": 32}, "has lora_alpha 16"),
    ({"config.hyperparams.lora.targetModules": ["q_proj", "v_proj"]}, "the plan's config.hyperparams.lora.targetModules"),
    ({"warmStartModelId": "feedbeef"}, "no model"),
])
def test_a_warm_start_that_does_not_fit_the_plan_is_refused_by_name(rl_cli, sft, grpo_child, change, words):
    child, _ = grpo_child
    model_id = registered_model(rl_cli, sft[0])
    before = count_runs(rl_cli)
    out = start_plan(rl_cli, warm_plan(child, model_id, **change))
    assert out.returncode != 0 and "warmStartModelId" in out.stderr and words in out.stderr, out.stderr
    assert count_runs(rl_cli) == before
