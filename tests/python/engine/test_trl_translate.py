"""The TRL worker's translation of a resolved plan (engines/trl/translate.py, grpo.py) into TRL's and
PEFT's settings, field by field as docs/engines.md writes it down; the settings are then accepted
by TRL's own SFTConfig and GRPOConfig (the pinned TRL)."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[3] / "engines" / "trl"))

import grpo  # noqa: E402
import translate  # noqa: E402


def sft_plan(**training) -> dict:
    return {"baseModel": "/m", "execution": {"gpus": 0}, "config": {
        "dataset": "/d.jsonl", "validationDataset": None, "method": "sft", "engine": "trl",
        "hyperparams": {
            "lora": {"rank": 4, "alpha": 12.0, "dropout": 0.1, "targetModules": ["q_proj", "v_proj"]},
            "optimizer": {"learningRate": 3e-4, "weightDecay": 0.01, "beta1": 0.8, "beta2": 0.95, "epsilon": 1e-6,
                          "maxGradNorm": 0.5, "schedule": "cosine", "warmupSteps": 0, "warmupRatio": 0.25},
            "training": {"epochs": 1, "maxSteps": 10, "batchSize": 3, "gradientAccumulation": 2,
                         "validationFrequencySteps": 0, "validationSplit": 0.0, "packing": False, "seed": 5,
                         **training}},
        "maxSeqLength": 96, "model": {"precision": "FP32"}}}


def test_sft_fields_translate_one_by_one_and_trl_accepts_them(tmp_path):
    kw = translate.sft_kwargs(sft_plan(), 10, str(tmp_path), use_cpu=True)
    assert kw["max_steps"] == 10 and kw["per_device_train_batch_size"] == 3 and kw["gradient_accumulation_steps"] == 2
    assert (kw["learning_rate"], kw["lr_scheduler_type"], kw["warmup_steps"]) == (3e-4, "cosine", 3)  # ceil(0.25 * 10)
    assert (kw["adam_beta1"], kw["adam_beta2"], kw["adam_epsilon"], kw["weight_decay"]) == (0.8, 0.95, 1e-6, 0.01)
    assert kw["max_grad_norm"] == 0.5 and kw["seed"] == 5 and kw["max_length"] == 96
    assert kw["train_sampling_strategy"] == "sequential" and not kw["bf16"]
    assert kw["model_init_kwargs"] == {"dtype": "float32"}
    assert translate.lora_kwargs(sft_plan()["config"]) == {
        "r": 4, "lora_alpha": 12.0, "lora_dropout": 0.1, "target_modules": ["q_proj", "v_proj"], "bias": "none",
        "task_type": "CAUSAL_LM"}
    from trl import SFTConfig
    cfg = SFTConfig(**kw)
    assert cfg.max_steps == 10 and cfg.warmup_steps == 3 and cfg.lr_scheduler_type == "cosine"


@pytest.mark.parametrize("training, field", [
    ({"packing": True}, "config.hyperparams.training.packing"),
    ({"validationSplit": 0.2}, "config.hyperparams.training.validationSplit"),
])
def test_what_trl_lacks_is_refused_by_field(training, field, tmp_path):
    with pytest.raises(translate.Refused, match=field):
        translate.sft_kwargs(sft_plan(**training), 10, str(tmp_path), use_cpu=True)


def test_grpo_fields_translate_and_trl_accepts_them(tmp_path):
    plan = sft_plan()
    plan["config"].update({"method": "gspo", "klBeta": 0.04, "reward": {"terms": [{"kind": "json-label-match"}]},
                           "rlHyperparams": {"groupSize": 4, "promptsPerStep": 2, "maxCompletionLength": 32,
                                             "temperature": 0.7, "topP": 0.9, "topK": 20, "clipLow": 0.2,
                                             "clipHigh": 0.28, "iterationsPerBatch": 1, "lossAggregation": "bnpo",
                                             "scaleRewards": "batch", "microBatchSize": 8,
                                             "optimizer": sft_plan()["config"]["hyperparams"]["optimizer"]}})
    kw = grpo.grpo_kwargs(plan, 6, str(tmp_path), use_cpu=True)
    assert kw["num_generations"] == 4 and kw["per_device_train_batch_size"] == 8
    assert kw["importance_sampling_level"] == "sequence" and kw["loss_type"] == "bnpo" and kw["scale_rewards"] == "batch"
    assert (kw["epsilon"], kw["epsilon_high"], kw["beta"], kw["top_k"]) == (0.2, 0.28, 0.04, 20)
    from trl import GRPOConfig
    cfg = GRPOConfig(**kw)
    assert cfg.num_generations == 4 and cfg.max_completion_length == 32
