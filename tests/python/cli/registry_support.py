"""Helpers of the model registry's tests: PEFT adapters written by PEFT itself on the tests' tiny
base model, and waiting for a registration to reach its outcome."""
from __future__ import annotations

import json
import pathlib
import time

import peft
import torch
import transformers


def make_peft_adapter(base: pathlib.Path, out: pathlib.Path, rank: int = 4,
                      targets: tuple[str, ...] = ("q_proj", "v_proj"), seed: int = 0) -> pathlib.Path:
    """A LoRA adapter that PEFT writes for `base` (B initialised non-zero, so it changes outputs)."""
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(str(base), dtype=torch.float32)
    config = peft.LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=list(targets), lora_dropout=0.0,
                             task_type="CAUSAL_LM")
    wrapped = peft.get_peft_model(model, config)
    with torch.no_grad():
        for name, p in wrapped.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    wrapped.save_pretrained(str(out))
    assert (out / "adapter_config.json").exists() and (out / "adapter_model.safetensors").exists()
    return out


def edit_config(folder: pathlib.Path, **changes) -> None:
    cfg = json.loads((folder / "adapter_config.json").read_text())
    cfg.update(changes)
    (folder / "adapter_config.json").write_text(json.dumps(cfg))


def wait_model(cli, model_id: str, statuses=("REGISTERED", "FAILED"), timeout: float = 120.0) -> dict:
    deadline = time.time() + timeout
    while True:
        model = cli.json("trained-models", "get", model_id)
        if model["status"] in statuses:
            return model
        assert time.time() < deadline, f"model {model_id} stayed {model['status']}"
        time.sleep(0.2)


def files_of(folder: pathlib.Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}
