"""The TRL engine (config.engine: trl, issue 28) through the real CLI against a real trainerd: the
same tiny SFT plan trained by the native engine and by TRL's SFTTrainer in the job's Python worker
(engines/trl). Same seed, same rows in the same order, fp32: the first step's loss is the base
model's loss on the same batch (a fresh LoRA adds nothing), so both engines must agree on it to
1e-5; `runs compare --across-plans` sees no window past a small margin; both adapters load in PEFT.
A TRL run paused and resumed trains the same losses as one uninterrupted (TRL's optimizer,
scheduler and RNG restored from our snapshot), and one continued (`runs continue`) from its step-2 snapshot
trains the original's steps 3 and 4. A native run's adapter branched onto TRL trains the
same first step as branched onto native. A worker that crashes, hangs, writes a line that is
not an event, or is SIGKILLed ends its run FAILED, naming which, with no claim left (the worker's
faults are injected through TRAINER_TRL_FAULT_FILE, a test-only hook of the worker); a cancelled one
stops its worker at a step boundary. A TRL GRPO
run scored by json-label-match (the job's own grader, asked by the worker) completes with its
reward figures and rollouts."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess

import pytest

from cli_support import (EXAMPLES, MODEL_NAME, WORKLOAD, Cli, ended, get_run, job_pids, losses, snapshot_at,
                         start_run_id, start_trainerd, stop, wait_for, wait_paused, wait_step)

STEPS = 8
REPO = pathlib.Path(__file__).resolve().parents[3]
SILENCE_SECONDS = 40  # TRAINER_TRL_SILENCE_SECONDS of this module's trainerd: a worker silent this long is hung


def rows() -> list[dict]:
    return [{"prompt": f"Review {i}: the {w} was {a}. Sentiment:",
             "completion": f" {'positive' if i % 2 else 'negative'}"}
            for i, (w, a) in enumerate([(w, a) for w in ("film", "pizza", "phone", "book") for a in
                                        ("fine", "awful", "great", "slow", "bright", "cold", "warm", "dull")])]


def plan(engine: str, steps: int = STEPS) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:",
        "  dataset: prompt-completion", f"  engine: {engine}",
        "  hyperparams:",
        "    lora: {rank: 8, alpha: 16, dropout: 0.0}",
        "    optimizer: {learningRate: 0.002, warmupSteps: 0, schedule: linear}",
        f"    training: {{maxSteps: {steps}, batchSize: 4, gradientAccumulation: 1, seed: 7}}",
        "  maxSeqLength: 128", "  model: {precision: FP32}",
        "execution: {gpus: 0, maxAttempts: 1}", ""])


@pytest.fixture(scope="module")
def fault_file(tmp_path_factory) -> pathlib.Path:
    path = tmp_path_factory.mktemp("fault") / "fault"
    path.write_text("")
    return path


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, fault_file, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]},
                             env={"TRAINER_TRL_FAULT_FILE": str(fault_file),
                                  "TRAINER_TRL_SILENCE_SECONDS": str(SILENCE_SECONDS)})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def ready(bin_dir, trainerd, tmp_path_factory) -> Cli:
    cli = Cli(bin_dir / "trainer", trainerd.url)
    data = tmp_path_factory.mktemp("data") / "pc.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
    cli("datasets", "create", "-f", data, "--name", "prompt-completion", check=True)
    cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", "sentiment", check=True)
    cli("workloads", "create", WORKLOAD, check=True)
    return cli


@pytest.fixture(scope="module")
def pair(ready) -> dict:
    """The same plan on both engines, run to their end."""
    ids = {"native": start_run_id(ready, plan("native")), "trl": start_run_id(ready, plan("trl"))}
    return {engine: ended(ready, run_id) for engine, run_id in ids.items()}


def test_native_and_trl_train_the_same_plan_and_agree_on_the_first_step(ready, pair):
    for engine, run in pair.items():
        assert run["phase"] == "COMPLETED", (engine, run.get("failureReason"))
    native, trl = (losses(ready, pair[e]["runId"]) for e in ("native", "trl"))
    assert sorted(native) == sorted(trl) == list(range(1, STEPS + 1))
    assert abs(native[1] - trl[1]) <= 1e-5, (native[1], trl[1])
    # Each step's figures come through as a native run's do.
    steps = ready.json("runs", "metrics", pair["trl"]["runId"])["steps"]
    assert all(s["gradNorm"] > 0 and s["learningRate"] > 0 for s in steps), steps[:2]
    assert steps[0]["learningRate"] == pytest.approx(0.002) and steps[-1]["learningRate"] < steps[0]["learningRate"]
    # The resolved plan names the engine; the engine is part of what the runs differ in.
    got = ready.json("runs", "compare", pair["trl"]["runId"], "--baseline", pair["native"]["runId"], "--window", "4",
                     "--margin", "0.05", "--across-plans")
    assert [d["field"] for d in got["planDifferences"]] == ["config.engine"], got["planDifferences"]
    assert len(got["windows"]) == 2 and got["firstPastMargin"] is None, got["windows"]
    refused = ready("runs", "compare", pair["trl"]["runId"], "--baseline", pair["native"]["runId"])
    assert refused.returncode == 2 and "config.engine" in refused.stderr, refused.stderr


def test_a_trl_run_reports_its_engine_config_runtime_and_hparams_as_a_native_one_does(ready, pair):
    run_id = pair["trl"]["runId"]
    config = ready.json("runs", "engine-config", run_id)
    assert config["requested"]["engine"] == "trl" and config["resolved"]["engine"] == "trl", config["resolved"]
    knobs = config["resolved"]["config"]  # TRL's own arguments, by TRL's names
    assert (knobs["adam_beta1"], knobs["adam_beta2"], knobs["learning_rate"]) == (0.9, 0.999, 0.002), knobs
    assert (knobs["max_steps"], knobs["per_device_train_batch_size"], knobs["seed"]) == (STEPS, 4, 7), knobs
    assert (knobs["lora_r"], knobs["lora_alpha"], knobs["lora_dropout"]) == (8, 16, 0.0), knobs
    report = ready.json("runs", "engine-runtime", run_id)
    assert report["engine"] == "trl", report
    model = report["model"]
    assert 0 < model["trainableParameters"] < model["totalParameters"], model
    assert report["rolloutEngine"] is None and report["trainer"]["changedBySetup"] == []
    # The worker ran in the TRL worker's own environment (.venv-trl, tools/setup), its TRL installed
    # there, and torch shared from the main environment (.venv).
    trl_env, main_env = ((REPO / name).resolve() for name in (".venv-trl", ".venv"))
    environment = report["environment"]
    assert pathlib.Path(environment["prefix"]).resolve() == trl_env, environment
    assert pathlib.Path(environment["trlPath"]).resolve().is_relative_to(trl_env), environment
    assert pathlib.Path(environment["torchPath"]).resolve().is_relative_to(main_env), environment
    for moment in ("afterLoad", "afterFirstStep"):
        assert report["memory"][moment]["allocatedBytes"] > 0, report["memory"]
    hparams = ready.json("runs", "hparams", run_id)
    assert hparams["sha"] == ready.json("runs", "get", run_id)["settingsSha"], hparams


def test_both_adapters_load_in_peft_and_change_the_model(pair, tiny_model):
    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    base = AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)
    with torch.no_grad():
        plain = base(ids).logits
    for engine, run in pair.items():
        files = sorted(p.name for p in pathlib.Path(run["adapterPath"]).iterdir())
        assert "adapter_model.safetensors" in files and "adapter_config.json" in files, (engine, files)
        model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32),
                                          run["adapterPath"])
        with torch.no_grad():
            adapted = model(ids).logits
        assert not torch.allclose(adapted, plain), f"the {engine} adapter changes nothing"


def test_a_native_adapter_branched_onto_trl_trains_the_same_first_step_as_onto_native(ready, pair, tmp_path):
    """`runs branch --restore weights` of the native run's final snapshot, once on each engine (the
    TRL child by an override of config.engine): TRL loads our adapter and, on the same batch, computes
    the same loss; the native run's training state cannot be continued on TRL."""
    parent = pair["native"]["runId"]
    source = snapshot_at(ready, parent, STEPS)
    to_trl = tmp_path / "trl.yaml"
    to_trl.write_text("engine: trl\n")
    children = {"native": ready.json("runs", "branch", parent, "--snapshot", source["snapshotId"], "--steps", "2",
                                     "--restore", "weights")["runId"],
                "trl": ready.json("runs", "branch", parent, "--snapshot", source["snapshotId"], "--steps", "2",
                                  "--restore", "weights", "--overrides", to_trl)["runId"]}
    done = {e: ended(ready, c) for e, c in children.items()}
    for engine, run in done.items():
        assert run["phase"] == "COMPLETED", (engine, run.get("failureReason"))
    first = {e: losses(ready, c)[1] for e, c in children.items()}
    assert abs(first["native"] - first["trl"]) <= 1e-5, first
    # The adapter was loaded: not the fresh adapter's (the base model's) loss of the parent's first step.
    assert abs(first["trl"] - losses(ready, parent)[1]) > 1e-3, (first, losses(ready, parent)[1])
    # A native training state never reaches the TRL worker: a continued child keeps its parent's engine.
    refused = ready("runs", "continue", parent, "--steps", "2", "--overrides", to_trl)
    assert refused.returncode != 0 and "overrides.engine: cannot change when the child restores trainingState" in \
        refused.stderr, refused.stderr


def test_a_trl_run_continued_from_its_step_n_snapshot_trains_the_originals_next_losses(ready):
    """`runs continue` of a TRL run's step-2 snapshot: the child gets TRL's optimizer moments and RNG
    from the snapshot's trainingState and the data where the parent left it, so on the same plan it
    trains the losses the parent trained at steps 3 and 4 (a constant schedule: the child's own
    schedule, spanning its own steps, has the parent's rates)."""
    text = (plan("trl", steps=4).replace("schedule: linear", "schedule: constant")
            .replace("maxAttempts: 1}", "maxAttempts: 1, saveEvery: 2}"))
    parent = ended(ready, start_run_id(ready, text))
    assert parent["phase"] == "COMPLETED", parent.get("failureReason")
    source = snapshot_at(ready, parent["runId"], 2)
    assert sorted(ready.json("snapshots", "get", source["snapshotId"][:12])["artifacts"]) == ["trainingState", "weights"]
    child = ended(ready, ready.json("runs", "continue", parent["runId"], "--snapshot", source["snapshotId"],
                                    "--steps", "2")["runId"])
    assert child["phase"] == "COMPLETED", child.get("failureReason")
    original, continued = losses(ready, parent["runId"]), losses(ready, child["runId"])
    assert sorted(continued) == [1, 2], continued
    for step in (1, 2):
        assert continued[step] == pytest.approx(original[step + 2], rel=1e-6, abs=1e-7), (continued, original)


def test_a_trl_run_paused_and_resumed_trains_as_the_uninterrupted_one(ready, pair):
    reference = losses(ready, pair["trl"]["runId"])
    run_id = start_run_id(ready, plan("trl"))
    wait_step(ready, run_id, 2)
    out = ready("runs", "pause", run_id, "--checkpoint", "save")
    assert out.returncode == 0, out.stderr
    run = wait_paused(ready, run_id)
    saved = run["pause"]["savedStep"]
    assert 2 <= saved < STEPS and not run.get("claim") and not job_pids(run_id), run["pause"]
    snap = ready.json("snapshots", "get", run["pause"]["snapshotId"][:12])
    assert sorted(snap["artifacts"]) == ["trainingState", "weights"]
    ready("runs", "resume", run_id, check=True)
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")
    resumed = losses(ready, run_id)
    assert sorted(resumed) == sorted(reference)
    for step in reference:
        assert resumed[step] == pytest.approx(reference[step], rel=1e-6, abs=1e-7), (step, resumed, reference)


def test_a_cancelled_trl_run_stops_its_worker_at_a_step_boundary(ready):
    run_id = start_run_id(ready, plan("trl", steps=200))
    wait_step(ready, run_id, 1)
    ready("runs", "cancel", run_id, "--force", check=True)
    run = ended(ready, run_id)
    assert run["phase"] == "CANCELLED", (run["phase"], run.get("failureReason"))
    assert 1 <= run["progress"]["step"] < 200 and not run.get("claim")
    wait_for(lambda: not job_pids(run_id) and not worker_pids(run_id), timeout=60, what="no job or worker left")


def worker_pids(run_id: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"trl_worker.py --input .*{run_id}"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.mark.parametrize("fault, reason", [
    ("crash@2", "the worker exited with status 3 before the run ended"),
    ("hang@2", f"the worker sent no event for {SILENCE_SECONDS} s"),
    ("garbage@2", "the worker wrote a line that is not a job-protocol event"),
    ("sigkill", "the worker was killed by signal 9 before the run ended"),
])
def test_a_worker_that_crashes_hangs_misspeaks_or_is_killed_fails_its_run_by_name(ready, fault_file, fault, reason):
    fault_file.write_text("" if fault == "sigkill" else fault)
    try:
        run_id = start_run_id(ready, plan("trl"))
        if fault == "sigkill":
            wait_step(ready, run_id, 1)
            pids = wait_for(lambda: worker_pids(run_id), timeout=60, what="the TRL worker's process")
            for pid in pids:
                os.kill(pid, signal.SIGKILL)
        run = ended(ready, run_id)
    finally:
        fault_file.write_text("")
    assert run["phase"] == "FAILED", run
    assert reason in run.get("failureReason", ""), run.get("failureReason")
    assert "engine trl" in run["failureReason"]
    assert not get_run(ready, run_id).get("claim")
    wait_for(lambda: not job_pids(run_id) and not worker_pids(run_id), timeout=60, what="no job or worker left")


def grpo_plan(engine: str) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:",
        "  dataset: sentiment", "  method: grpo", f"  engine: {engine}",
        "  hyperparams: {lora: {rank: 8, alpha: 16}, training: {maxSteps: 2, seed: 3}}",
        "  reward: {terms: [{kind: json-label-match}]}",
        "  rlHyperparams: {groupSize: 2, promptsPerStep: 2, maxCompletionLength: 12}",
        "  maxSeqLength: 256", "  model: {precision: FP32}", "execution: {gpus: 0, maxAttempts: 1}", ""])


def test_a_trl_grpo_run_scored_by_the_jobs_json_label_match_completes_with_rewards_and_rollouts(ready):
    run = ended(ready, start_run_id(ready, grpo_plan("trl")))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    steps = ready.json("runs", "metrics", run["runId"])["steps"]
    assert [s["step"] for s in steps] == [1, 2]
    for s in steps:
        rl = s["rl"]
        assert [t["name"] for t in rl["terms"]] == ["json-label-match"] and rl["completionsScored"] == 4, rl
        assert len(rl["rollouts"]) == 4
        assert rl["rewardMean"] == pytest.approx(sum(r["reward"] for r in rl["rollouts"]) / 4, abs=1e-6)
        assert all(0.0 <= r["reward"] <= 1.0 and r["completion"] for r in rl["rollouts"])
    doc = ready.json("runs", "rollouts", run["runId"])
    assert doc["total"] == 4 and len(doc["rollouts"]) == 4, doc
    assert [r["completion"] for r in doc["rollouts"]] == [r["completion"][:2000] for r in steps[1]["rl"]["rollouts"]]
    for r in doc["rollouts"]:
        assert r["terms"][0]["name"] == "json-label-match" and r["reward"] == pytest.approx(r["terms"][0]["raw"])
    runtime = ready.json("runs", "engine-runtime", run["runId"])
    assert runtime["rolloutEngine"]["engine"] == "trl" and runtime["rolloutEngine"]["groupSize"] == 2, runtime
    assert set(runtime["memory"]) == {"afterLoad", "afterFirstRollout", "afterFirstStep"}, runtime["memory"]


def test_a_trl_grpo_steps_rl_figures_have_the_fields_of_a_native_ones(ready):
    """The same GRPO plan on both engines: each TRL step's `rl` object has exactly the native step's
    fields (and each term's), filled from the worker's batch and the job's replies: the rewards per
    completion, their zero and full shares, the phase seconds, failures by cause, and the step's
    batch tokens counted."""
    runs = {e: ended(ready, start_run_id(ready, grpo_plan(e))) for e in ("native", "trl")}
    for engine, run in runs.items():
        assert run["phase"] == "COMPLETED", (engine, run.get("failureReason"))
    steps = {e: ready.json("runs", "metrics", r["runId"])["steps"] for e, r in runs.items()}
    native, trl = steps["native"][0], steps["trl"][0]
    assert set(trl["rl"]) == set(native["rl"]), set(trl["rl"]) ^ set(native["rl"])
    assert set(trl["rl"]["terms"][0]) == set(native["rl"]["terms"][0])
    assert set(trl["rl"]["terms"][0]["failuresByCause"]) == set(native["rl"]["terms"][0]["failuresByCause"])
    for s in steps["trl"]:
        rl = s["rl"]
        rewards = rl["rewards"]
        assert len(rewards) == 4 and rewards == [r["reward"] for r in rl["rollouts"]], rl
        assert rl["rewardZeroShare"] == pytest.approx(sum(r == 0 for r in rewards) / 4)
        assert rl["rewardFullShare"] == pytest.approx(sum(r >= 1 for r in rewards) / 4)
        assert rl["generatedTokens"] == sum(rl["completionLengths"]) and len(rl["completionLengths"]) == 4
        assert all(0 < n <= 12 for n in rl["completionLengths"]), rl["completionLengths"]
        assert rl["generationSeconds"] > 0 and rl["rewardSeconds"] > 0 and rl["actorUpdateSeconds"] > 0, rl
        assert rl["generationSeconds"] + rl["rewardSeconds"] + rl["oldLogprobSeconds"] <= s["stepSeconds"] + 1e-6
        term = rl["terms"][0]
        assert term["failures"] == sum(term["failuresByCause"].values()) and len(term["callSeconds"]) == 4, term
        assert s["batchTokens"] > rl["generatedTokens"] > 0 and s["trainedTokens"] == rl["generatedTokens"], s


def test_on_chat_rows_trl_trains_the_assistants_tokens_as_native_does(ready):
    """Chat (`messages`) rows: trainer-job hands the TRL worker the rows tokenized and masked as the
    native engine does (the assistant's tokens trained), so the first step trains the same tokens
    and both engines' first-step losses agree to 1e-5 (a fresh LoRA: the base model's loss)."""
    chat = plan("native", steps=2).replace("dataset: prompt-completion", "dataset: sentiment")
    runs = {e: ended(ready, start_run_id(ready, chat.replace("engine: native", f"engine: {e}"))) for e in ("native", "trl")}
    for engine, run in runs.items():
        assert run["phase"] == "COMPLETED", (engine, run.get("failureReason"))
    first = {e: ready.json("runs", "metrics", r["runId"])["steps"][0] for e, r in runs.items()}
    assert first["trl"]["trainedTokens"] == first["native"]["trainedTokens"], first
    assert first["trl"]["trainedTokens"] < first["trl"]["batchTokens"], first["trl"]  # the prompts are not trained
    assert abs(first["native"]["loss"] - first["trl"]["loss"]) <= 1e-5, first
