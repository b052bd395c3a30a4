"""Fixtures of the serving tests: a tiny Qwen3-shaped model made with transformers, two PEFT
LoRA adapters with random nonzero B (so each changes the outputs), and `trainer-job serve`
started on a loopback port with both attached."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))

import models  # noqa: E402  (tests/python/models.py)
from serve_support import ADAPTERS, start_serve, stop_serve  # noqa: E402


def make_adapter(model_dir, dest, seed):
    import peft
    import torch
    import transformers

    base = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, init_lora_weights=False, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    peft.get_peft_model(base, cfg).save_pretrained(dest)
    return pathlib.Path(dest)


@pytest.fixture(scope="session")
def served_models(tmp_path_factory):
    """{"base": folder, "alpha": adapter folder, "beta": adapter folder}."""
    root = tmp_path_factory.mktemp("serve-models")
    # Sharp weights (std 0.3): logits far from uniform, so greedy parity is not decided by ties.
    base = models.make_tiny_model(root / "tiny-qwen3", arch="qwen3", tokenizer="qwen3", seed=3,
                                  initializer_range=0.3)
    out = {"base": base}
    for name, seed in ADAPTERS.items():
        out[name] = make_adapter(base, root / name, seed)
    return out


@pytest.fixture(scope="module")
def server(bin_dir, served_models):
    """`trainer-job serve` with the base model and adapters alpha and beta, on a loopback port."""
    served = start_serve(bin_dir, served_models, "--kv-blocks", 256, "--block-size", 16, "--context-limit", 512)
    yield served
    stop_serve(served)
