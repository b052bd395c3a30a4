"""The resolved plan (plan::to_json, the same JSON the TRL worker receives) translated into verl's
configuration: overrides of verl's hydra `ppo_trainer` config (verl/trainer/config/ppo_trainer.yaml),
field by field as docs/engines.md writes them down. A plan field verl has no counterpart for is
refused here by name (refusals()). Imports nothing of verl, so it runs anywhere; the tests compose
the overrides with the pinned verl's own config and validate them with verl's own checks.
"""
from __future__ import annotations

import math

# lossAggregation -> verl's actor.loss_agg_mode (docs/loss-formulas and reference: TRL <-> verl).
LOSS_AGG_MODE = {
    "dapo": "token-mean",                # sum of token losses / the batch's completion tokens
    "grpo": "seq-mean-token-mean",       # each completion's token mean, then the mean over completions
    "dr_grpo": "seq-mean-token-sum-norm",  # token sums / (completions x maxCompletionLength)
}

# hyperparams.optimizer.schedule -> verl's optim.lr_scheduler_type (its FSDP engine builds these two).
SCHEDULE = {"constant": "constant", "cosine": "cosine"}

# Plan fields verl lacks, with why: refused before anything starts.
WHY = {
    "config.method": "verl trains grpo and gspo runs; sft runs go to engine native or trl",
    "config.rlHyperparams.lossAggregation": "verl has no per-micro-batch token mean (TRL's bnpo); "
                                            "use dapo (token-mean), grpo (seq-mean-token-mean) or dr_grpo",
    "config.rlHyperparams.scaleRewards": "verl's GRPO advantage divides by the group's std or by nothing "
                                         "(norm_adv_by_std_in_grpo); 'batch' has no counterpart: use group or none",
    "config.rlHyperparams.stopStrings": "verl's rollout config takes no stop strings",
    "config.rlHyperparams.tools": "verl calls tools through its own multi-turn tool classes, not a tool executable",
    "config.hyperparams.lora.dropout": "verl's FSDP LoRA (PEFT) is built without dropout; set it to 0",
    "config.rlHyperparams.optimizer.schedule": "verl's FSDP engine schedules constant or cosine, not linear",
    "config.maxSeqLength": "must leave room for the prompt: verl's max_prompt_length is maxSeqLength minus "
                           "maxCompletionLength",
    "config.hyperparams.training.maxSteps": "verl counts steps in generation batches: maxSteps must be a multiple "
                                     "of rlHyperparams.iterationsPerBatch",
    "config.validationDataset": "the verl worker does not relay validation yet",
    "config.hyperparams.training.validationSplit": "the verl worker does not relay validation yet",
    "pauseAtStep": "verl saves at save_freq only; it cannot pause at a step",
    "warmStartModelId": "the verl worker does not load a starting adapter yet",
    "config.hyperparams.lora.rank": "vLLM serves LoRA ranks up to 512",
}


class Refused(ValueError):
    """A plan field verl cannot honour; str() names the field."""


def refusals(plan: dict, total_steps: int | None = None) -> list[str]:
    """The plan fields (dotted) verl cannot honour, each with the reason."""
    config = plan["config"]
    out = []
    if config.get("method", "sft") not in ("grpo", "gspo"):
        out.append("config.method")
        return [f"{f}: {WHY[f]}" for f in out]
    rl = config["rlHyperparams"]
    if rl["lossAggregation"] not in LOSS_AGG_MODE:
        out.append("config.rlHyperparams.lossAggregation")
    if rl["scaleRewards"] not in ("group", "none"):
        out.append("config.rlHyperparams.scaleRewards")
    if rl.get("stopStrings"):
        out.append("config.rlHyperparams.stopStrings")
    if rl.get("tools"):
        out.append("config.rlHyperparams.tools")
    if float(config["hyperparams"]["lora"]["dropout"]) > 0:
        out.append("config.hyperparams.lora.dropout")
    if int(config["hyperparams"]["lora"]["rank"]) > 512:
        out.append("config.hyperparams.lora.rank")
    if rl["optimizer"]["schedule"] not in SCHEDULE:
        out.append("config.rlHyperparams.optimizer.schedule")
    if int(config["maxSeqLength"]) <= int(rl["maxCompletionLength"]):
        out.append("config.maxSeqLength")
    if total_steps is not None and total_steps % int(rl["iterationsPerBatch"]) != 0:
        out.append("config.hyperparams.training.maxSteps")
    if config.get("validationDataset"):
        out.append("config.validationDataset")
    if config["hyperparams"]["training"].get("validationSplit", 0) > 0:
        out.append("config.hyperparams.training.validationSplit")
    if plan.get("pauseAtStep"):
        out.append("pauseAtStep")
    if plan.get("warmStartModelId"):
        out.append("warmStartModelId")
    return [f"{f}: {WHY[f]}" for f in out]


def warmup_steps(optimizer: dict, total_steps: int) -> int:
    """As the native engine (optim::warmup_steps): warmupSteps, else ceil(warmupRatio * total)."""
    if optimizer.get("warmupSteps", 0) > 0:
        return int(optimizer["warmupSteps"])
    return int(math.ceil(optimizer.get("warmupRatio", 0.0) * total_steps))


def overrides(plan: dict, *, total_steps: int, model_path: str, train_files: str, output_dir: str,
              reward_path: str) -> dict:
    """verl's config keys (dotted, as hydra overrides name them) and the plan's values for them.

    total_steps: the run's optimizer steps (plan::total_steps); train_files: the parquet of prompts the
    worker writes in the native engine's order; output_dir: verl's checkpoints; reward_path: the file
    whose compute_score() relays each completion to the job's graders."""
    refused = refusals(plan, total_steps)
    if refused:
        raise Refused("; ".join(refused))
    config = plan["config"]
    rl, opt, lora = config["rlHyperparams"], config["rlHyperparams"]["optimizer"], config["hyperparams"]["lora"]
    iterations = int(rl["iterationsPerBatch"])
    seed = int(config["hyperparams"]["training"]["seed"])
    gpus = max(1, int(plan["execution"]["gpus"]))
    kl = float(config.get("klBeta", 0.0))
    bf16 = config["model"]["precision"] == "BF16"
    max_grad_norm = float(opt["maxGradNorm"])
    micro = int(rl["microBatchSize"])
    save_every = plan["execution"].get("saveEvery")
    a, r = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return {
        # the algorithm
        "algorithm.adv_estimator": "grpo",
        "algorithm.norm_adv_by_std_in_grpo": rl["scaleRewards"] == "group",
        "algorithm.use_kl_in_reward": False,
        f"{a}.policy_loss.loss_mode": "gspo" if config["method"] == "gspo" else "vanilla",
        f"{a}.loss_agg_mode": LOSS_AGG_MODE[rl["lossAggregation"]],
        # dr_grpo's constant: verl divides the token sums by it (TRL: max_completion_length)
        f"{a}.loss_scale_factor": int(rl["maxCompletionLength"]) if rl["lossAggregation"] == "dr_grpo" else None,
        f"{a}.clip_ratio": float(rl["clipLow"]),
        f"{a}.clip_ratio_low": float(rl["clipLow"]),
        f"{a}.clip_ratio_high": float(rl["clipHigh"]),
        f"{a}.use_kl_loss": kl > 0,
        f"{a}.kl_loss_coef": kl,
        f"{a}.kl_loss_type": "low_var_kl",
        f"{a}.entropy_coeff": 0,
        f"{a}.ppo_epochs": iterations,
        # batches: one generation batch of promptsPerStep prompts, groupSize completions each, is one
        # optimizer step per iteration (the mini-batch is the whole batch)
        "data.train_batch_size": int(rl["promptsPerStep"]),
        f"{a}.ppo_mini_batch_size": int(rl["promptsPerStep"]),
        f"{a}.ppo_micro_batch_size_per_gpu": micro,
        f"{r}.log_prob_micro_batch_size_per_gpu": micro,
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": micro,
        f"{a}.shuffle": False,
        f"{a}.data_loader_seed": seed,
        # the optimizer (AdamW); verl's schedule moves once per generation batch
        f"{a}.optim.lr": float(opt["learningRate"]),
        f"{a}.optim.betas": [float(opt["beta1"]), float(opt["beta2"])],
        f"{a}.optim.weight_decay": float(opt["weightDecay"]),
        f"{a}.optim.override_optimizer_config": {"eps": float(opt["epsilon"])},
        f"{a}.optim.clip_grad": max_grad_norm if max_grad_norm > 0 else float("inf"),
        f"{a}.optim.lr_scheduler_type": SCHEDULE[opt["schedule"]],
        f"{a}.optim.lr_warmup_steps": int(math.ceil(warmup_steps(opt, total_steps) / iterations)),
        f"{a}.optim.min_lr_ratio": 0.0,
        f"{a}.fsdp_config.seed": seed,
        f"{a}.fsdp_config.dtype": "bfloat16" if bf16 else "float32",
        # the model and its adapter
        "actor_rollout_ref.model.path": model_path,
        "actor_rollout_ref.model.lora_rank": int(lora["rank"]),
        "actor_rollout_ref.model.lora_alpha": float(lora["alpha"]),
        "actor_rollout_ref.model.target_modules": list(lora["targetModules"]),
        "actor_rollout_ref.model.use_remove_padding": True,
        # the rollout: vLLM, groupSize completions per prompt
        f"{r}.name": "vllm",
        f"{r}.mode": "async",
        f"{r}.n": int(rl["groupSize"]),
        f"{r}.temperature": float(rl["temperature"]),
        f"{r}.top_p": float(rl["topP"]),
        f"{r}.top_k": int(rl["topK"]) if int(rl["topK"]) > 0 else -1,
        f"{r}.dtype": "bfloat16" if bf16 else "float32",
        f"{r}.tensor_model_parallel_size": 1,
        f"{r}.seed": seed,
        # the data: the worker's parquet, read in order
        "data.train_files": train_files,
        "data.val_files": train_files,
        "data.prompt_key": "prompt",
        "data.max_prompt_length": int(config["maxSeqLength"]) - int(rl["maxCompletionLength"]),
        "data.max_response_length": int(rl["maxCompletionLength"]),
        "data.truncation": "left",
        "data.filter_overlong_prompts": False,
        "data.shuffle": False,
        "data.seed": seed,
        "data.dataloader_num_workers": 0,
        # rewards: the job's graders, through the worker (reward.py)
        "reward.custom_reward_function.path": reward_path,
        "reward.custom_reward_function.name": "compute_score",
        "critic.enable": False,
        # the trainer
        "trainer.total_training_steps": total_steps // iterations,
        "trainer.total_epochs": 1_000_000,  # the steps bound the run, as maxSteps/epochs did in total_steps
        # saveEvery's steps, else only the last step (verl saves at its last step when save_freq > 0):
        # the worker takes each save's LoRA adapter into a snapshot, the last one as the final adapter
        "trainer.save_freq": max(1, int(save_every) // iterations) if save_every else total_steps // iterations,
        "trainer.n_gpus_per_node": gpus,
        "trainer.nnodes": 1,
        "trainer.logger": ["console", "file"],
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,
        "trainer.resume_mode": "disable",
        "trainer.default_local_dir": output_dir,
        "trainer.project_name": "trainer",
        "trainer.experiment_name": "run",
        "trainer.device": "cuda",
    }


def _value(v) -> str:
    """A value as hydra's override grammar reads it back to the same value."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return "inf" if math.isinf(v) else repr(v)
    if isinstance(v, int):
        return str(v)
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k}:{_value(x)}" for k, x in v.items()) + "}"
    text = str(v)
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def as_hydra_overrides(keys: dict) -> list[str]:
    """KEY=VALUE arguments for `python -m verl.trainer.main_ppo` (or hydra's compose)."""
    return [f"{k}={_value(v)}" for k, v in keys.items()]
