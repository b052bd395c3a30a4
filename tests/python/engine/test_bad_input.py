"""Bad model folders and mismatched tokenizers get a clear error naming the file and field."""
import json
import shutil

import pytest

from engine_helpers import write_jsonl

ROWS = [{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]}]


def score(job, model, data):
    return job("score", "--model", model, "--data", data, check=False)


def test_missing_model_folder(job, tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    out = score(job, tmp_path / "nowhere", data)
    assert out.returncode == 1
    assert f"{tmp_path / 'nowhere'}: no such model folder" in out.stderr


def test_unknown_architecture_names_config_field(job, tiny_models, tmp_path):
    model = shutil.copytree(tiny_models("qwen3"), tmp_path / "m")
    cfg = json.loads((model / "config.json").read_text())
    cfg["architectures"] = ["MambaForCausalLM"]
    (model / "config.json").write_text(json.dumps(cfg))
    out = score(job, model, write_jsonl(tmp_path / "d.jsonl", ROWS))
    assert out.returncode == 1
    assert f"{model / 'config.json'}: field 'architectures': unknown architecture 'MambaForCausalLM'" in out.stderr


def test_malformed_config_and_missing_weights(job, tiny_models, tmp_path):
    data = write_jsonl(tmp_path / "d.jsonl", ROWS)
    model = shutil.copytree(tiny_models("qwen3"), tmp_path / "m")
    (model / "config.json").write_text("{broken")
    out = score(job, model, data)
    assert f"{model / 'config.json'}: not a JSON object" in out.stderr
    model2 = shutil.copytree(tiny_models("qwen3"), tmp_path / "m2")
    (model2 / "model.safetensors").unlink()
    out = score(job, model2, data)
    assert out.returncode == 1
    assert "neither model.safetensors nor model.safetensors.index.json" in out.stderr


def test_truncated_weights_name_the_tensor(job, tiny_models, tmp_path):
    model = shutil.copytree(tiny_models("qwen3"), tmp_path / "m")
    weights = model / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:-1000])
    out = score(job, model, write_jsonl(tmp_path / "d.jsonl", ROWS))
    assert out.returncode == 1
    assert f"{weights}: tensor '" in out.stderr and "field 'data_offsets'" in out.stderr


def test_config_that_does_not_match_the_weights(job, tiny_models, tmp_path):
    model = shutil.copytree(tiny_models("qwen3"), tmp_path / "m")
    cfg = json.loads((model / "config.json").read_text())
    cfg["intermediate_size"] = 96
    (model / "config.json").write_text(json.dumps(cfg))
    out = score(job, model, write_jsonl(tmp_path / "d.jsonl", ROWS))
    assert out.returncode == 1
    assert "tensor 'model.layers.0.mlp.gate_proj.weight' has shape [128, 64] but config.json implies [96, 64]" in out.stderr


def test_tokenizer_that_does_not_match_the_vocabulary(job, tmp_path):
    import models

    model = models.make_tiny_model(tmp_path / "m", arch="qwen3", tokenizer="qwen3", vocab_size=1000,
                                  pad_token_id=None, eos_token_id=None, bos_token_id=None)
    out = score(job, model, write_jsonl(tmp_path / "d.jsonl", ROWS))
    assert out.returncode == 1
    assert f"{model / 'tokenizer.json'}: the tokenizer has" in out.stderr
    assert "config.json field 'vocab_size' is 1000" in out.stderr
