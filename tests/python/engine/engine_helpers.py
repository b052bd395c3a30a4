"""Helpers shared by the engine tests."""
import json
import pathlib


def load_hf(folder, dtype="float32"):
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype))
    model.eval()
    return model


def write_jsonl(path, rows):
    path = pathlib.Path(path)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path
