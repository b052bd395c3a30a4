"""The resolved plan (plan::to_json, as trainer-job trains with it) translated into TRL's and PEFT's
configuration: keyword arguments for trl.SFTConfig and peft.LoraConfig. docs/engines.md writes the
same table down field by field; a plan field with no TRL counterpart is refused here by name (and at
submission through the engine capability table). Imports nothing of TRL, so it is testable alone.
"""
from __future__ import annotations

import math

# Plan fields the TRL engine does not offer, with why: refused before anything loads.
UNSUPPORTED = {
    "config.hyperparams.training.packing": "packing: TRL packs by its own rule (BFD), not the native engine's greedy rows",
    "config.hyperparams.training.validationSplit": "validation is not relayed from TRL yet",
    "config.validationDataset": "validation is not relayed from TRL yet",
    "config.hyperparams.training.validationFrequencySteps": "validation is not relayed from TRL yet",
}


class Refused(ValueError):
    """A plan field the TRL engine cannot honour; str() names the field."""


def refusals(config: dict) -> list[str]:
    """The plan fields (dotted) the TRL engine cannot honour, each with the reason."""
    out = []
    training = config["hyperparams"]["training"]
    if config.get("method", "sft") != "sft":
        return out  # GRPO/GSPO: grpo.py translates them; the capability table refuses what it lacks
    if training.get("packing"):
        out.append("config.hyperparams.training.packing")
    if training.get("validationSplit", 0) > 0:
        out.append("config.hyperparams.training.validationSplit")
    if config.get("validationDataset"):
        out.append("config.validationDataset")
    if training.get("validationFrequencySteps", 0) > 0:
        out.append("config.hyperparams.training.validationFrequencySteps")
    return [f"{field}: {UNSUPPORTED[field]}" for field in out]


def warmup_steps(optimizer: dict, total_steps: int) -> int:
    """As the native engine (optim::warmup_steps): warmupSteps, else ceil(warmupRatio * total)."""
    if optimizer.get("warmupSteps", 0) > 0:
        return int(optimizer["warmupSteps"])
    return int(math.ceil(optimizer.get("warmupRatio", 0.0) * total_steps))


def lora_kwargs(config: dict) -> dict:
    lora = config["hyperparams"]["lora"]
    return {"r": int(lora["rank"]), "lora_alpha": float(lora["alpha"]), "lora_dropout": float(lora["dropout"]),
            "target_modules": list(lora["targetModules"]), "bias": "none", "task_type": "CAUSAL_LM"}


def sft_kwargs(plan: dict, total_steps: int, output_dir: str, use_cpu: bool) -> dict:
    """SFTConfig's keyword arguments for the plan (the model dtype goes in model_init_kwargs)."""
    config = plan["config"]
    refused = refusals(config)
    if refused:
        raise Refused("; ".join(refused))
    opt = config["hyperparams"]["optimizer"]
    training = config["hyperparams"]["training"]
    fp32 = config["model"]["precision"] == "FP32"
    max_grad_norm = float(opt["maxGradNorm"])
    return {
        "output_dir": output_dir,
        "max_steps": int(total_steps),
        "per_device_train_batch_size": int(training["batchSize"]),
        "gradient_accumulation_steps": int(training["gradientAccumulation"]),
        "learning_rate": float(opt["learningRate"]),
        "lr_scheduler_type": {"linear": "linear", "cosine": "cosine", "constant": "constant_with_warmup"}[opt["schedule"]],
        "warmup_steps": warmup_steps(opt, total_steps),
        "optim": "adamw_torch",
        "adam_beta1": float(opt["beta1"]),
        "adam_beta2": float(opt["beta2"]),
        "adam_epsilon": float(opt["epsilon"]),
        "weight_decay": float(opt["weightDecay"]),
        "max_grad_norm": max_grad_norm if max_grad_norm > 0 else 0.0,
        "seed": int(training["seed"]),
        "max_length": int(config["maxSeqLength"]),
        "packing": False,
        "bf16": not fp32,
        "fp16": False,
        "use_cpu": use_cpu,
        # The rows come in the native engine's order (trainer-job hands it over): read in sequence.
        "train_sampling_strategy": "sequential",
        "dataloader_num_workers": 0,
        "logging_steps": 1,
        "save_strategy": "no",  # saves are asked for by the worker's callback (saveEvery, pause, the end)
        "report_to": [],
        "disable_tqdm": True,
        "gradient_checkpointing": False,
        "model_init_kwargs": {"dtype": "float32" if fp32 else "bfloat16"},
    }
