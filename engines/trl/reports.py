"""The TRL engine's own reports (docs/job-protocol.md `engine_config` and `engine_runtime`; served by
`trainer runs engine-config` and `runs engine-runtime`): every knob TRL trains with, as TRL's own
arguments name them, and what the worker measured at setup and after the first step and rollout."""
from __future__ import annotations

import json


def _plain(value):
    """JSON as TRL's arguments hold it: sets sorted, enums and dtypes by name."""
    return json.loads(json.dumps(value, default=lambda v: sorted(v) if isinstance(v, (set, frozenset)) else str(v)))


def engine_config(trainer) -> dict:
    """TRL's resolved arguments (TrainingArguments.to_dict()) with the LoRA adapter's settings."""
    config = _plain(trainer.args.to_dict())
    peft = getattr(trainer.model, "peft_config", {}).get("default")
    if peft is not None:
        lora = _plain(peft.to_dict())
        config.update({"lora_r": lora.get("r"), "lora_alpha": lora.get("lora_alpha"),
                       "lora_dropout": lora.get("lora_dropout"), "lora_target_modules": lora.get("target_modules"),
                       "lora_bias": lora.get("bias")})
    return config


def memory_now(trainer, torch) -> dict:
    """What the worker holds now: the CUDA allocator's figures, or on CPU the bytes of the model's
    tensors and the optimizer's state (the CPU allocator keeps no statistics)."""
    if torch.cuda.is_available() and next(trainer.model.parameters()).is_cuda:
        free, total = torch.cuda.mem_get_info()
        return {"allocatedBytes": torch.cuda.memory_allocated(), "reservedBytes": torch.cuda.memory_reserved(),
                "deviceFreeBytes": free, "deviceTotalBytes": total}
    seen, held = set(), 0
    tensors = list(trainer.model.parameters()) + list(trainer.model.buffers())
    tensors += [p.grad for p in trainer.model.parameters() if p.grad is not None]
    optimizer = getattr(trainer, "optimizer", None)
    if optimizer is not None:
        for state in optimizer.state.values():
            tensors += [v for v in state.values() if torch.is_tensor(v)]
    for t in tensors:
        if id(t) not in seen:
            seen.add(id(t))
            held += t.numel() * t.element_size()
    return {"allocatedBytes": held, "measuredAs": "the model's, gradients' and optimizer's tensors"}


def setup_report(trainer, rl: bool, dtype: str, changed: list[dict], torch) -> dict:
    params = list(trainer.model.parameters())
    total = sum(p.numel() for p in params)
    trainable = sum(p.numel() for p in params if p.requires_grad)
    rollout = None
    if rl:
        args = trainer.args
        rollout = {"engine": "trl", "generation": "vllm" if getattr(args, "use_vllm", False) else "transformers generate",
                   "groupSize": args.num_generations, "maxCompletionLength": args.max_completion_length,
                   "temperature": args.temperature, "topP": args.top_p}
    import sys

    import trl
    return {"rolloutEngine": rollout,
            # where the worker's Python and TRL come from: .venv-trl, its own environment (tools/setup)
            "environment": {"python": sys.executable, "prefix": sys.prefix, "trl": trl.__version__,
                            "trlPath": trl.__file__, "torchPath": torch.__file__},
            "trainer": {"changedBySetup": changed},
            "model": {"totalParameters": total, "trainableParameters": trainable, "frozenParameters": total - trainable,
                      "trainableShare": trainable / total if total else 0.0, "dtype": dtype},
            "memory": {"afterLoad": memory_now(trainer, torch)}}
