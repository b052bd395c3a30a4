"""The verl engine's translation of a resolved plan (engines/verl/translate.py) into verl's hydra
`ppo_trainer` overrides, field by field as docs/engines.md writes it down; the overrides composed
with the pinned verl's own packaged config and validated by verl's own checks (verl_worker.py
--check, in .venv-verl); and verl's logged metrics turned into the job protocol's step events
(metrics.py). No GPU: verl's training itself needs vLLM on CUDA."""
from __future__ import annotations

import copy
import importlib.util
import json
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]


def load(name: str):
    """engines/verl/NAME.py under a name of its own (engines/trl has a translate.py too)."""
    spec = importlib.util.spec_from_file_location(f"verl_engine_{name}", REPO / "engines" / "verl" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


metrics = load("metrics")
translate = load("translate")

VERL_PYTHON = REPO / ".venv-verl" / "bin" / "python"
A = "actor_rollout_ref.actor"
R = "actor_rollout_ref.rollout"


def rl_plan(method="grpo", **rl) -> dict:
    opt = {"learningRate": 3e-5, "weightDecay": 0.02, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6,
           "maxGradNorm": 0.5, "schedule": "cosine", "warmupSteps": 0, "warmupRatio": 0.25}
    return {"baseModel": "/models/tiny", "execution": {"gpus": 2, "saveEvery": 4}, "config": {
        "dataset": "/d.jsonl", "validationDataset": None, "method": method, "engine": "verl", "klBeta": 0.04,
        "hyperparams": {"lora": {"rank": 8, "alpha": 16.0, "dropout": 0.0, "targetModules": ["q_proj", "v_proj"]},
                        "optimizer": dict(opt), "training": {
                            "epochs": 1, "maxSteps": 8, "batchSize": 3, "gradientAccumulation": 1,
                            "validationFrequencySteps": 0, "validationSplit": 0.0, "packing": False, "seed": 5}},
        "maxSeqLength": 512, "model": {"precision": "BF16"},
        "reward": {"terms": [{"kind": "json-label-match", "weight": 1.0}]},
        "rlHyperparams": {"groupSize": 4, "promptsPerStep": 2, "maxCompletionLength": 64, "temperature": 0.7,
                          "topP": 0.9, "topK": 20, "clipLow": 0.2, "clipHigh": 0.28, "iterationsPerBatch": 1,
                          "lossAggregation": "dapo", "scaleRewards": "group", "microBatchSize": 8, "stopStrings": [],
                          "optimizer": dict(opt), **rl}}}


def translated(plan: dict, total: int = 8) -> dict:
    return translate.overrides(plan, total_steps=total, model_path="/models/tiny", train_files="/o/train.parquet",
                               output_dir="/o/checkpoints", reward_path="/e/reward.py")


def test_each_plan_field_lands_on_its_verl_key():
    keys = translated(rl_plan())
    assert keys["algorithm.adv_estimator"] == "grpo" and keys[f"{A}.policy_loss.loss_mode"] == "vanilla"
    assert keys[f"{R}.n"] == 4 and keys["data.train_batch_size"] == 2 and keys[f"{A}.ppo_mini_batch_size"] == 2
    assert (keys[f"{R}.temperature"], keys[f"{R}.top_p"], keys[f"{R}.top_k"]) == (0.7, 0.9, 20)
    assert (keys["data.max_prompt_length"], keys["data.max_response_length"]) == (512 - 64, 64)
    assert (keys[f"{A}.clip_ratio_low"], keys[f"{A}.clip_ratio_high"]) == (0.2, 0.28)
    assert (keys[f"{A}.use_kl_loss"], keys[f"{A}.kl_loss_coef"], keys[f"{A}.kl_loss_type"]) == (True, 0.04, "low_var_kl")
    assert (keys[f"{A}.optim.lr"], keys[f"{A}.optim.betas"], keys[f"{A}.optim.weight_decay"]) == (3e-5, [0.8, 0.95], 0.02)
    assert keys[f"{A}.optim.override_optimizer_config"] == {"eps": 1e-6} and keys[f"{A}.optim.clip_grad"] == 0.5
    assert (keys[f"{A}.optim.lr_scheduler_type"], keys[f"{A}.optim.lr_warmup_steps"]) == ("cosine", 2)  # ceil(.25*8)
    assert (keys["actor_rollout_ref.model.lora_rank"], keys["actor_rollout_ref.model.lora_alpha"]) == (8, 16.0)
    assert keys["actor_rollout_ref.model.target_modules"] == ["q_proj", "v_proj"]
    assert keys[f"{A}.ppo_micro_batch_size_per_gpu"] == 8 and keys[f"{R}.log_prob_micro_batch_size_per_gpu"] == 8
    assert (keys["trainer.total_training_steps"], keys["trainer.save_freq"], keys["trainer.n_gpus_per_node"]) == (8, 4, 2)
    assert keys["data.seed"] == keys[f"{A}.data_loader_seed"] == keys[f"{R}.seed"] == 5 and keys["data.shuffle"] is False
    assert keys[f"{A}.fsdp_config.dtype"] == "bfloat16" and keys[f"{R}.name"] == "vllm"


@pytest.mark.parametrize("method, aggregation, scale, mode, agg, by_std, scale_factor", [
    ("grpo", "grpo", "group", "vanilla", "seq-mean-token-mean", True, None),
    ("gspo", "dapo", "group", "gspo", "token-mean", True, None),
    ("grpo", "dr_grpo", "none", "vanilla", "seq-mean-token-sum-norm", False, 64),  # Dr. GRPO
])
def test_grpo_gspo_and_dr_grpo_loss_settings(method, aggregation, scale, mode, agg, by_std, scale_factor):
    keys = translated(rl_plan(method, lossAggregation=aggregation, scaleRewards=scale))
    assert keys[f"{A}.policy_loss.loss_mode"] == mode
    assert keys[f"{A}.loss_agg_mode"] == agg
    assert keys["algorithm.norm_adv_by_std_in_grpo"] is by_std
    assert keys[f"{A}.loss_scale_factor"] == scale_factor


def test_several_iterations_per_batch_count_verl_steps_in_generation_batches():
    keys = translated(rl_plan(iterationsPerBatch=2), total=8)
    assert keys[f"{A}.ppo_epochs"] == 2 and keys["trainer.total_training_steps"] == 4 and keys["trainer.save_freq"] == 2
    with pytest.raises(translate.Refused, match="config.hyperparams.training.maxSteps"):
        translated(rl_plan(iterationsPerBatch=3), total=8)


def test_verl_saves_at_its_last_step_without_save_every_and_at_least_every_step_with_it():
    """Each verl save becomes a snapshot of its adapter, the last one the run's final adapter: verl
    saves at its last step only when save_freq > 0, so a plan without saveEvery saves there alone."""
    plan = rl_plan(iterationsPerBatch=2)
    del plan["execution"]["saveEvery"]
    assert translated(plan, total=8)["trainer.save_freq"] == 4  # the run's 4 verl steps: the last one
    plan["execution"]["saveEvery"] = 1  # fewer optimizer steps than a generation batch's: every verl step
    assert translated(plan, total=8)["trainer.save_freq"] == 1


def test_no_gradient_clipping_is_an_infinite_bound_not_zero():
    plan = rl_plan()
    plan["config"]["rlHyperparams"]["optimizer"]["maxGradNorm"] = 0.0
    assert translated(plan)[f"{A}.optim.clip_grad"] == float("inf")
    assert "actor_rollout_ref.actor.optim.clip_grad=inf" in translate.as_hydra_overrides(translated(plan))


def refused_field(edit) -> str:
    plan = rl_plan()
    edit(plan)
    with pytest.raises(translate.Refused) as e:
        translated(plan)
    return str(e.value)


@pytest.mark.parametrize("field, edit", [
    ("config.method", lambda p: p["config"].update(method="sft")),
    ("config.rlHyperparams.lossAggregation", lambda p: p["config"]["rlHyperparams"].update(lossAggregation="bnpo")),
    ("config.rlHyperparams.scaleRewards", lambda p: p["config"]["rlHyperparams"].update(scaleRewards="batch")),
    ("config.rlHyperparams.stopStrings", lambda p: p["config"]["rlHyperparams"].update(stopStrings=["\n"])),
    ("config.rlHyperparams.tools", lambda p: p["config"]["rlHyperparams"].update(tools={"command": "/bin/t"})),
    ("config.hyperparams.lora.dropout", lambda p: p["config"]["hyperparams"]["lora"].update(dropout=0.1)),
    ("config.hyperparams.lora.rank", lambda p: p["config"]["hyperparams"]["lora"].update(rank=1024)),
    ("config.rlHyperparams.optimizer.schedule", lambda p: p["config"]["rlHyperparams"]["optimizer"].update(schedule="linear")),
    ("config.maxSeqLength", lambda p: p["config"].update(maxSeqLength=64)),
    ("config.validationDataset", lambda p: p["config"].update(validationDataset="/v.jsonl")),
    ("pauseAtStep", lambda p: p.update(pauseAtStep=3)),
    ("warmStartModelId", lambda p: p.update(warmStartModelId="m-1")),
])
def test_what_verl_lacks_is_refused_by_field(field, edit):
    message = refused_field(edit)
    assert message.startswith(field + ": ") and translate.WHY[field] in message


def test_a_plan_with_several_gaps_names_each():
    def edit(p):
        p["config"]["rlHyperparams"].update(lossAggregation="bnpo", scaleRewards="batch")
    message = refused_field(edit)
    assert "config.rlHyperparams.lossAggregation" in message and "config.rlHyperparams.scaleRewards" in message


def run_check(plan: dict, tmp_path: pathlib.Path, total: int = 8) -> tuple[int, list[dict], str]:
    """verl_worker.py --check in .venv-verl: verl's packaged config composed with the overrides and
    validated by verl's own checks. Its exit status, events and stderr."""
    if not VERL_PYTHON.exists():
        pytest.fail(f"{VERL_PYTHON} not found: tools/setup creates .venv-verl (verl==0.9.1)")
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"q{i}"},
                                                     {"role": "assistant", "content": f"a{i}"}]}) + "\n"
                            for i in range(4)))
    plan = copy.deepcopy(plan)
    plan["config"]["dataset"] = str(data)
    job = {"plan": plan, "settingsSha": "x", "order": [2, 0, 3, 1, 0, 1, 2, 3], "rows": 4, "totalSteps": total,
           "outputDir": str(tmp_path / "verl")}
    (tmp_path / "input.json").write_text(json.dumps(job))
    done = subprocess.run([str(VERL_PYTHON), str(REPO / "engines" / "verl" / "verl_worker.py"), "--input",
                           str(tmp_path / "input.json"), "--check"], capture_output=True, text=True, timeout=600)
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines() if line.strip()], done.stderr


def verl_check(plan: dict, tmp_path: pathlib.Path) -> dict:
    """What verl resolved at each translated key (the check's engine_config event)."""
    code, events, stderr = run_check(plan, tmp_path)
    assert code == 0, (events, stderr[-3000:])
    (config,) = [e["config"] for e in events if e["type"] == "engine_config"]
    return config


@pytest.mark.parametrize("method, aggregation, scale", [("grpo", "grpo", "group"), ("gspo", "dapo", "group"),
                                                        ("grpo", "dr_grpo", "none")])
def test_verl_composes_and_validates_the_overrides_and_each_key_keeps_the_plans_value(method, aggregation, scale,
                                                                                     tmp_path):
    plan = rl_plan(method, lossAggregation=aggregation, scaleRewards=scale)
    resolved = verl_check(plan, tmp_path)
    wanted = translated(plan)
    wanted["data.train_files"] = wanted["data.val_files"] = str(tmp_path / "verl" / "train.parquet")
    wanted["trainer.default_local_dir"] = str(tmp_path / "verl" / "checkpoints")
    wanted["reward.custom_reward_function.path"] = str(REPO / "engines" / "verl" / "reward.py")
    assert resolved == wanted


def test_verl_itself_rejects_what_its_checks_forbid(tmp_path):
    """The check is verl's own: 2 prompts x 4 completions do not split over 3 GPUs, which the
    translation passes on and verl's validate_config refuses."""
    plan = rl_plan()
    plan["execution"]["gpus"] = 3
    code, events, _ = run_check(plan, tmp_path)
    assert code == 1 and events[-1]["type"] == "failed"
    assert "real_train_batch_size (8) must be divisible by minimal possible batch size (3)" in events[-1]["reason"]


def test_verl_metrics_become_a_step_event_with_the_native_names():
    line = json.dumps({"step": 3, "data": {
        "actor/pg_loss": -0.0125, "actor/lr": 2.5e-5, "actor/grad_norm": 0.75, "critic/score/mean": 0.5,
        "critic/score/max": 1.0, "critic/score/min": 0.0, "response_length/mean": 12.5, "response_length/min": 4.0,
        "response_length/max": 64.0, "response_length/clip_ratio": 0.125, "actor/entropy": 1.5, "actor/kl_loss": 0.01,
        "actor/pg_clipfrac": 0.05, "timing_s/step": 2.0, "timing_s/gen": 1.25, "timing_s/reward": 0.25,
        "timing_s/old_log_prob": 0.1, "timing_s/update_actor": 0.3, "perf/total_num_tokens": 400,
        "training/global_step": 3}})
    step, data = metrics.parse_line(line)
    ev = metrics.step_event(step, data, total_steps=8, iterations=1, rows=4, prompts_per_step=2,
                            rewards=[1.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0, 1.0])
    assert (ev["step"], ev["epoch"], ev["loss"], ev["learningRate"], ev["gradNorm"]) == (3, 1, -0.0125, 2.5e-5, 0.75)
    assert (ev["batchTokens"], ev["tokensPerSecond"], ev["stepSeconds"], ev["trainedTokens"]) == (400, 200.0, 2.0, 100)
    rl = ev["rl"]
    assert (rl["rewardMean"], rl["completionLengthMean"], rl["completionLengthMin"], rl["completionLengthMax"]) == (
        0.5, 12.5, 4.0, 64.0)
    assert (rl["truncatedShare"], rl["entropy"], rl["kl"], rl["clipRatio"]) == (0.125, 1.5, 0.01, 0.05)
    assert (rl["generationSeconds"], rl["rewardSeconds"], rl["oldLogprobSeconds"], rl["actorUpdateSeconds"]) == (
        1.25, 0.25, 0.1, 0.3)
    assert (rl["completionsScored"], rl["rewardZeroShare"], rl["rewardFullShare"]) == (8, 0.5, 0.5)
    assert rl["rewardStd"] == pytest.approx((8 * 0.25 / 7) ** 0.5)


def test_a_figure_verl_does_not_log_is_left_out_and_a_bad_line_is_named():
    ev = metrics.step_event(2, {"actor/pg_loss": 0.5}, total_steps=4, iterations=2, rows=4, prompts_per_step=2)
    assert ev["step"] == 4 and ev["loss"] == 0.5 and "rewardMean" not in ev["rl"] and "entropy" not in ev["rl"]
    with pytest.raises(ValueError, match="not a verl file-logger line"):
        metrics.parse_line('{"step": "x"}')
