"""`trainer trained-models export` (issue 30, "Take the model away") through the real CLI against a
real trainerd: a completed run's registered adapter is written into a folder of the user's as the
PEFT folder the registry holds, and PEFT loads it onto the base model with exactly its tensors."""
from __future__ import annotations

import json
import pathlib
import urllib.parse

import pytest
import torch
from safetensors.torch import load_file

from cli_support import plan_text
from registry_support import wait_model

pytestmark = pytest.mark.timeout(900)


@pytest.fixture(scope="module")
def model_id(ready) -> str:
    run_id = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan_text(2), check=True).stdout.strip()
    ready("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True, timeout=700)
    model = ready.json("runs", "get", run_id)["modelId"]
    assert wait_model(ready, model)["status"] == "REGISTERED"
    return model


def test_an_exported_adapter_is_the_registry_folder_and_peft_loads_its_tensors(ready, model_id, tiny_model, tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    out_dir = tmp_path / "mine" / "adapter"
    text = ready("trained-models", "export", model_id[:10], "--to", out_dir, check=True).stdout
    assert f"Exported model {model_id}" in text and str(out_dir) in text and "PeftModel.from_pretrained" in text, text
    # Byte for byte what the registry holds.
    uri = ready.json("trained-models", "get", model_id)["artifact"]["uri"]
    registry = pathlib.Path(urllib.parse.urlparse(uri).path)
    for name in ("adapter_config.json", "adapter_model.safetensors"):
        assert (out_dir / name).read_bytes() == (registry / name).read_bytes(), name
    assert json.loads((out_dir / "adapter_config.json").read_text())["peft_type"] == "LORA"

    base = AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32)
    tuned = PeftModel.from_pretrained(base, out_dir)
    saved = load_file(str(out_dir / "adapter_model.safetensors"))
    params = dict(tuned.named_parameters())
    assert saved
    for key, tensor in saved.items():
        loaded = params[key.replace(".lora_A.weight", ".lora_A.default.weight").replace(".lora_B.weight", ".lora_B.default.weight")]
        assert torch.equal(loaded.detach(), tensor.to(loaded.dtype)), key
    assert any(t.abs().sum() > 0 for k, t in saved.items() if "lora_B" in k), "a trained adapter has a non-zero B"

    # -o json says what was written.
    doc = ready.json("trained-models", "export", model_id, "--to", tmp_path / "again")
    assert doc["modelId"] == model_id and doc["format"] == "peft"
    assert [f["name"] for f in doc["files"]] == ["adapter_config.json", "adapter_model.safetensors"]
    assert all(pathlib.Path(f["path"]).stat().st_size == f["bytes"] > 0 for f in doc["files"])


def test_export_refuses_an_unknown_model_and_a_missing_folder_by_name(ready, model_id, tmp_path):
    missing = ready("trained-models", "export", "feedface", "--to", tmp_path / "x")
    assert missing.returncode == 1 and "feedface" in missing.stderr, missing.stderr
    assert not (tmp_path / "x").exists()
    usage = ready("trained-models", "export", model_id)
    assert usage.returncode == 2 and "--to DIR" in usage.stderr, usage.stderr
