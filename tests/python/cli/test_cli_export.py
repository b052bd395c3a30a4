"""`trainer trained-models export` (issue 30, "Take the model away") through the real CLI against a
real trainerd: a completed run's registered adapter is written into a folder of the user's as the
PEFT folder the registry holds, and PEFT loads it onto the base model with exactly its tensors; with
--merged, as a Hugging Face model folder (the adapter merged into the base's weights by trainerd) whose
logits transformers computes as PEFT does with the adapter."""
from __future__ import annotations

import json
import pathlib
import urllib.parse

import pytest
import torch
from safetensors.torch import load_file

from cli_support import MODEL_NAME, plan_text
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


# ---- --merged (--format hf): the adapter merged into the base model, a Hugging Face folder

PROMPTS = ["I loved this film", "terrible, boring, too long", "The weather today is", "ok"]


def logits_of(model, tokenizer) -> list[torch.Tensor]:
    with torch.no_grad():
        return [model(**tokenizer(p, return_tensors="pt")).logits[0] for p in PROMPTS]


def max_relative_difference(a: list[torch.Tensor], b: list[torch.Tensor]) -> float:
    """max |a - b| / max |b| over every prompt's logits."""
    return max(((x - y).abs().max() / y.abs().max()).item() for x, y in zip(a, b))


def test_a_merged_export_loads_in_transformers_and_matches_the_base_with_the_adapter(ready, model_id, tiny_model,
                                                                                     tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out_dir = tmp_path / "mine" / "merged"
    text = ready("trained-models", "export", model_id[:10], "--merged", "--to", out_dir, check=True, timeout=600).stdout
    assert f"Exported model {model_id} merged into base model" in text and str(out_dir) in text, text
    assert "AutoModelForCausalLM.from_pretrained" in text, text
    names = sorted(p.name for p in out_dir.iterdir())
    assert "config.json" in names and "model.safetensors" in names and "tokenizer.json" in names, names
    assert not any(n.startswith(".") for n in (p.name for p in out_dir.parent.iterdir())), "no temporary folder left"

    # Every base weight, under its own name and dtype, nothing else.
    base_weights = load_file(str(tiny_model / "model.safetensors"))
    merged_weights = load_file(str(out_dir / "model.safetensors"))
    assert merged_weights.keys() == base_weights.keys()
    assert all(merged_weights[k].dtype == base_weights[k].dtype for k in base_weights)
    changed = {k for k in base_weights if not torch.equal(merged_weights[k], base_weights[k])}
    assert changed and all(k.endswith("_proj.weight") for k in changed), changed

    tokenizer = AutoTokenizer.from_pretrained(out_dir)
    assert tokenizer("hello")["input_ids"] == AutoTokenizer.from_pretrained(tiny_model)("hello")["input_ids"]
    merged = AutoModelForCausalLM.from_pretrained(out_dir, torch_dtype=torch.float32).eval()
    got = logits_of(merged, tokenizer)

    peft_dir = tmp_path / "peft"
    ready("trained-models", "export", model_id, "--format", "peft", "--to", peft_dir, check=True)
    with_adapter = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32), peft_dir).eval()
    want = logits_of(with_adapter, tokenizer)
    peft_merged = PeftModel.from_pretrained(
        AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32), peft_dir).merge_and_unload().eval()
    want_merged = logits_of(peft_merged, tokenizer)
    base = logits_of(AutoModelForCausalLM.from_pretrained(tiny_model, torch_dtype=torch.float32).eval(), tokenizer)

    to_adapter = max_relative_difference(got, want)
    to_peft_merge = max_relative_difference(got, want_merged)
    print(f"merged export vs base+adapter: {to_adapter:.3g}; vs PEFT merge_and_unload: {to_peft_merge:.3g}; "
          f"base vs base+adapter: {max_relative_difference(base, want):.3g}")
    assert to_adapter < 1e-5 and to_peft_merge < 1e-5
    assert max_relative_difference(base, want) > 100 * max(to_adapter, 1e-7), "the adapter changes the logits"
    # The merged weights are PEFT's merged weights.
    state = peft_merged.state_dict()
    for k in changed:
        assert torch.allclose(merged_weights[k], state[k], rtol=0, atol=1e-6), k

    # -o json says what was written; a second export is served from trainerd's merged folder.
    doc = ready.json("trained-models", "export", model_id, "--format", "hf", "--to", tmp_path / "again")
    assert doc["modelId"] == model_id and doc["format"] == "hf"
    assert sorted(f["name"] for f in doc["files"]) == names
    assert all(pathlib.Path(f["path"]).stat().st_size == f["bytes"] > 0 for f in doc["files"])
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (out_dir / "model.safetensors").read_bytes()


def test_a_merged_export_refuses_a_base_model_a_used_folder_and_unknown_formats_by_name(ready, model_id, tmp_path):
    base = ready.json("trained-models", "register", "-f", "-",
                      input=json.dumps({"servingModel": {"variant": "BASE", "baseModel": MODEL_NAME}}))
    refused = ready("trained-models", "export", base["modelId"], "--merged", "--to", tmp_path / "base")
    assert refused.returncode == 1, refused.stderr
    assert f"model {base['modelId']} is a BASE model: it has no adapter to export or merge" in refused.stderr, refused.stderr
    assert not (tmp_path / "base").exists() and not list(tmp_path.iterdir()), "nothing written"

    unknown = ready("trained-models", "export", model_id, "--format", "gguf", "--to", tmp_path / "g")
    assert unknown.returncode == 2 and "--format: unknown format 'gguf'" in unknown.stderr, unknown.stderr
    both = ready("trained-models", "export", model_id, "--merged", "--format", "peft", "--to", tmp_path / "g")
    assert both.returncode == 2 and "--merged and --format peft" in both.stderr, both.stderr
    assert not (tmp_path / "g").exists()

    used = tmp_path / "used"
    used.mkdir()
    (used / "notes.txt").write_text("mine")
    taken = ready("trained-models", "export", model_id, "--merged", "--to", used)
    assert taken.returncode == 1 and "already exists and is not an empty folder" in taken.stderr, taken.stderr
    assert sorted(p.name for p in used.iterdir()) == ["notes.txt"]

    missing = ready("trained-models", "export", "feedface", "--merged", "--to", tmp_path / "x")
    assert missing.returncode == 1 and "feedface" in missing.stderr, missing.stderr
    assert not (tmp_path / "x").exists()
