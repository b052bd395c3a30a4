"""`config.engine` and the engine's reports of itself (issue 28), through the real `trainer` CLI
against a real trainerd running the real job: `--dry-run --show-resolved` shows the native engine;
an unknown engine, verl on this deployment and a field TRL's translation lacks are refused by name
and start nothing; a native SFT and a native GRPO run show `runs engine-config` (the plan's config
as submitted beside every knob the engine trained with) and `runs engine-runtime` (rollout engine,
setup changes, parameter counts, memory moments); both say "not found" while the job has not
written them (a run waiting for a pool whose only device arrives in 2099)."""
from __future__ import annotations

import pytest

from cli_support import (DATASET_NAME, MODEL_NAME, WORKLOAD, Cli, cancel_run, count_runs, plan_text, prepare,
                         start_run, start_run_id, start_trainerd, stop, wait_phase)
from toy_rl_service import toy_rl_service

RL_MODEL = "toy-policy"
RL_DATASET = "toy-tickets"
RL_WORKLOAD = "engine-reports"


def with_config_lines(text: str, *lines: str) -> str:
    """The plan `text` with `lines` (YAML, indented under config:) added at config's top."""
    return text.replace("config:\n", "config:\n" + "".join(f"  {line}\n" for line in lines), 1)


def rl_plan(steps: int = 2, config_lines: tuple[str, ...] = (), rl_lines: tuple[str, ...] = (), gpus: int = 0) -> str:
    """A GRPO plan of the toy policy; `config_lines` and `rl_lines` add YAML lines under config and
    config.rlHyperparams."""
    return "\n".join([
        "kind: run", f"workload: {RL_WORKLOAD}", f"baseModel: {RL_MODEL}", "config:", f"  dataset: {RL_DATASET}",
        "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        *[f"  {line}" for line in config_lines],
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {steps}, seed: 3}}",
        "  reward: {terms: [{kind: json-label-match}]}",
        "  rlHyperparams:", "    groupSize: 4", "    promptsPerStep: 2", "    maxCompletionLength: 8",
        "    microBatchSize: 8", "    optimizer: {learningRate: 0.006, beta2: 0.99}",
        *[f"    {line}" for line in rl_lines],
        f"execution: {{gpus: {gpus}}}"]) + "\n"


# ---- the plan field and its refusals ---------------------------------------------------------------

def test_the_resolved_plan_shows_the_native_engine(ready):
    resolved = ready.json("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=plan_text())["plan"]
    assert resolved["config"]["engine"] == "native", resolved["config"]
    written = ready.json("runs", "start", "-f", "-", "--dry-run", "--show-resolved",
                         input=with_config_lines(plan_text(), "engine: native"))["plan"]
    assert written["config"] == resolved["config"]


def test_engines_that_cannot_run_a_plan_are_refused_by_name_and_start_nothing(ready):
    before = count_runs(ready)
    cases = [
        # An engine of no such name: the field and the allowed values.
        (with_config_lines(plan_text(), "engine: deepspeed"),
         ["config.engine", 'must be one of "native", "trl", "verl", got "deepspeed"']),
        # verl trains RL runs only, and on this deployment not at all: what it lacks, each named.
        (with_config_lines(plan_text(), "engine: verl"), ["config.method", "engine verl cannot run this"]),
        # verl has no linear schedule (the plan's default): the field and why.
        (rl_plan(2, ("engine: verl",), gpus=1), ["config.rlHyperparams.optimizer.schedule", "engine verl cannot run this"]),
        (rl_plan(2, ("engine: verl",), gpus=1).replace("beta2: 0.99}", "beta2: 0.99, schedule: cosine}"),
         ["config.engine", "engine verl is not available on this deployment", "it has verl 0.9.1",
          "a GPU rollout engine (vLLM or SGLang on CUDA devices", "the Ray compute backend"]),
        # A field TRL's translation does not carry: the engine and the field.
        (rl_plan(2, ("engine: trl",), ("stopStrings: ['}']",)),
         ["config.rlHyperparams.stopStrings", "engine trl cannot run this"]),
        (with_config_lines(plan_text(), "engine: trl") + "smoke: true\n", ["smoke", "engine trl cannot run this"]),
    ]
    for text, expected in cases:
        for flags in (["--dry-run"], ["--force"]):
            out = ready("runs", "start", "-f", "-", *flags, input=text)
            assert out.returncode != 0, (flags, text, out.stdout)
            for part in expected:
                assert part in out.stderr, (flags, part, out.stderr)
    # trainer-job starts the verl worker (src/job/verl_engine.h): the refusal names only what the deployment lacks.
    verl = rl_plan(2, ("engine: verl",), gpus=1).replace("beta2: 0.99}", "beta2: 0.99, schedule: cosine}")
    out = ready("runs", "start", "-f", "-", "--dry-run", input=verl)
    assert out.returncode != 0 and "GPU rollout engine" in out.stderr, out.stderr
    assert "trainer-job" not in out.stderr and "verl worker" not in out.stderr, out.stderr
    assert count_runs(ready) == before


# ---- a native SFT run's reports --------------------------------------------------------------------

OPTIMIZER = "{learningRate: 0.003, beta1: 0.85}"


@pytest.fixture(scope="module")
def sft_run(ready) -> dict:
    return start_run(ready, plan_text(3, optimizer=OPTIMIZER), "--wait")


def test_engine_config_shows_the_plan_as_submitted_beside_every_knob_the_engine_used(ready, sft_run):
    assert sft_run["phase"] == "COMPLETED", sft_run
    doc = ready.json("runs", "engine-config", sft_run["runId"])
    requested, resolved = doc["requested"], doc["resolved"]
    # As submitted: the CLI sends the plan with its defaults filled in, names not yet resolved
    # (the dataset by its name, not the hash admission resolved it to).
    assert requested["hyperparams"]["optimizer"]["beta1"] == 0.85, requested
    assert requested["hyperparams"]["optimizer"]["learningRate"] == 0.003, requested
    assert requested["dataset"] == DATASET_NAME and requested["engine"] == "native", requested
    assert resolved["engine"] == "native" and doc["attempt"] == 1
    config = resolved["config"]
    assert config["adam_beta1"] == 0.85 and config["adam_beta2"] == 0.999 and config["adam_epsilon"] == 1e-8
    assert config["learning_rate"] == 0.003 and config["max_steps"] == 3 and config["lr_scheduler_type"] == "linear"
    assert config["per_device_train_batch_size"] == 4 and config["gradient_accumulation_steps"] == 1
    assert (config["lora_r"], config["lora_alpha"], config["dtype"], config["seed"]) == (8, 16.0, "float32", 42)
    text = ready("runs", "engine-config", sft_run["runId"], check=True).stdout
    assert "resolved.adam_beta1" in text and "0.85" in text and "requested.hyperparams.optimizer.beta1" in text, text


def test_engine_runtime_shows_the_setup_parameter_counts_and_memory_of_an_sft_run(ready, sft_run):
    doc = ready.json("runs", "engine-runtime", sft_run["runId"])
    assert (doc["engine"], doc["attempt"], doc["rolloutEngine"]) == ("native", 1, None), doc
    assert doc["trainer"]["changedBySetup"] == [], doc["trainer"]
    model = doc["model"]
    assert 0 < model["trainableParameters"] < model["totalParameters"], model
    assert model["totalParameters"] == model["trainableParameters"] + model["frozenParameters"], model
    memory = doc["memory"]
    assert set(memory) == {"afterLoad", "afterFirstStep"}, memory
    assert memory["afterLoad"]["allocatedBytes"] > 0 and memory["afterFirstStep"]["allocatedBytes"] > 0, memory
    assert memory["afterFirstStep"]["peakAllocatedBytes"] >= memory["afterFirstStep"]["allocatedBytes"], memory
    text = ready("runs", "engine-runtime", sft_run["runId"], check=True).stdout
    assert "none (supervised)" in text and "model.trainableParameters" in text, text


def test_hparams_sha_is_the_runs_settings_hash(ready, sft_run):
    hparams = ready.json("runs", "hparams", sft_run["runId"])
    assert hparams["sha"] == sft_run["settingsSha"] and len(hparams["sha"]) == 64, (hparams["sha"], sft_run)
    # As the hash: the native engine is left out (runs from before engines keep their hash).
    assert "config.engine" not in hparams["hparams"], hparams["hparams"]
    assert hparams["hparams"]["config.hyperparams.optimizer.beta1"] == 0.85


# ---- not found until the job writes them ----------------------------------------------------------

@pytest.fixture(scope="module")
def later_cli(bin_dir, tiny_model, tmp_path_factory):
    """A trainerd whose only pool gets its device in 2099: a run waits for devices, its job unstarted."""
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), {
        "baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
        "pools": [{"name": "later", "accelerator": "cpu", "declared": 0,
                   "windows": [{"devices": 1, "opens": "2099-01-01T00:00:00Z", "closes": "2099-01-02T00:00:00Z"}]}]})
    yield prepare(Cli(bin_dir / "trainer", service.url))
    stop(service.proc, service.data_dir)


def test_reports_are_not_found_until_the_job_writes_them(later_cli):
    run_id = start_run_id(later_cli, plan_text(3))
    try:
        wait_phase(later_cli, run_id, "WAITING_FOR_DEVICES")
        for command, what in (("engine-config", "engine configuration"), ("engine-runtime", "engine runtime report")):
            out = later_cli("runs", command, run_id)
            assert out.returncode != 0, out.stdout
            assert f"run {run_id} has no {what} yet: not found until the job writes it" in out.stderr, out.stderr
    finally:
        cancel_run(later_cli, run_id)


# ---- a native GRPO run's reports -------------------------------------------------------------------

@pytest.fixture(scope="module")
def rl_cli(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=RL_MODEL, dataset=RL_DATASET, workload=RL_WORKLOAD) as (_, cli):
        yield cli


def test_a_grpo_runs_reports_name_its_rollout_engine_and_the_memory_after_its_first_rollout(rl_cli):
    run = start_run(rl_cli, rl_plan(2), "--wait")
    assert run["phase"] == "COMPLETED", run
    config = rl_cli.json("runs", "engine-config", run["runId"])
    requested = config["requested"]["rlHyperparams"]["optimizer"]
    assert (requested["learningRate"], requested["beta2"]) == (0.006, 0.99), requested
    knobs = config["resolved"]["config"]
    assert knobs["adam_beta1"] == 0.9 and knobs["adam_beta2"] == 0.99 and knobs["learning_rate"] == 0.006, knobs
    assert (knobs["num_generations"], knobs["generation_batch_size"], knobs["max_completion_length"]) == (4, 8, 8)
    assert (knobs["loss_type"], knobs["importance_sampling_level"], knobs["beta"]) == ("dapo", "token", 0.0)
    assert knobs["reward_funcs"] == ["json-label-match"] and knobs["reward_weights"] == [1.0], knobs

    runtime = rl_cli.json("runs", "engine-runtime", run["runId"])
    rollout = runtime["rolloutEngine"]
    assert (rollout["kind"], rollout["device"], rollout["replicas"]) == ("native", "cpu", 1), rollout
    assert rollout["batch"] == {"promptsPerStep": 2, "groupSize": 4, "completionsPerStep": 8}, rollout
    assert rollout["sampling"]["temperature"] == 1.0 and rollout["sampling"]["maxCompletionLength"] == 8, rollout
    assert runtime["trainer"]["changedBySetup"] == []
    assert 0 < runtime["model"]["trainableParameters"] < runtime["model"]["totalParameters"], runtime["model"]
    memory = runtime["memory"]
    assert set(memory) == {"afterLoad", "afterFirstRollout", "afterFirstStep"}, memory
    assert all(m["allocatedBytes"] > 0 for m in memory.values()), memory
    hparams = rl_cli.json("runs", "hparams", run["runId"])
    assert hparams["sha"] == run["settingsSha"], (hparams["sha"], run["settingsSha"])
