"""Loss masks: which tokens of a row are trained.

- Templates with {% generation %} markers (TRL's training templates): our input ids and mask
  equal transformers' apply_chat_template(return_assistant_tokens_mask=True), which is what
  TRL's SFTTrainer(assistant_only_loss=True) trains on.
- The npm tokenizers' own templates (no markers): every assistant message is trained from
  where the generation prompt ends through its end-of-turn token (and the whitespace written
  right after it), so the trained tokens decode to exactly the assistant turns; where the
  training template renders the same text, the mask equals TRL's.
"""
from __future__ import annotations

import json
import pathlib
import shutil

import pytest

from conversations import CONVERSATIONS
from models import tokenizer_dir

TRAINING_TEMPLATES = {"qwen3": "qwen3_training.jinja", "llama3": "llama3_training.jinja"}
END_OF_TURN = {"qwen3": "<|im_end|>\n", "llama3": "<|eot_id|>"}


def training_template(name: str) -> str:
    import trl

    return (pathlib.Path(trl.__file__).parent / "chat_templates" / TRAINING_TEMPLATES[name]).read_text()


@pytest.fixture(scope="module")
def marked_folders(tmp_path_factory):
    """Tokenizer folders whose chat_template is TRL's training template (with generation markers)."""
    out = {}
    for name in TRAINING_TEMPLATES:
        folder = tmp_path_factory.mktemp(f"{name}_training")
        shutil.copyfile(tokenizer_dir(name) / "tokenizer.json", folder / "tokenizer.json")
        config = json.loads((tokenizer_dir(name) / "tokenizer_config.json").read_text())
        config["chat_template"] = training_template(name)
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
        out[name] = folder
    return out


def runs(ids, mask, decode):
    """The trained tokens decoded run by run."""
    out, run = [], []
    for i, m in zip(ids, mask):
        if m:
            run.append(i)
        elif run:
            out.append(decode(run))
            run = []
    if run:
        out.append(decode(run))
    return out


def hf_masked(hf, messages, tools, template):
    out = hf.apply_chat_template(messages, tools=tools, chat_template=template, tokenize=True, return_dict=True,
                                 return_assistant_tokens_mask=True)
    return list(out["input_ids"]), list(out["assistant_masks"])


@pytest.mark.parametrize("name,messages,tools", CONVERSATIONS, ids=[c[0] for c in CONVERSATIONS])
def test_generation_markers_match_transformers(probe, marked_folders, tokenizer_name, hf_tokenizers, name, messages,
                                               tools):
    hf = hf_tokenizers[tokenizer_name]
    ids, mask = hf_masked(hf, messages, tools, training_template(tokenizer_name))
    row = {"messages": messages, **({"tools": tools} if tools else {})}
    ours = probe.ok(op="row", dir=str(marked_folders[tokenizer_name]), row=row)
    assert ours["input_ids"] == ids
    assert ours["trained"] == mask
    assert probe.ok(op="info", dir=str(marked_folders[tokenizer_name]))["has_generation_markers"] is True


@pytest.mark.parametrize("name,messages,tools", CONVERSATIONS, ids=[c[0] for c in CONVERSATIONS])
def test_own_template_trains_exactly_the_assistant_turns(probe, tokenizer_name, hf_tokenizers, name, messages, tools):
    hf = hf_tokenizers[tokenizer_name]
    row = {"messages": messages, **({"tools": tools} if tools else {})}
    ours = probe.ok(op="row", dir=str(tokenizer_dir(tokenizer_name)), row=row)
    # The ids are those of apply_chat_template with the tokenizer's own template.
    expected_ids = hf.apply_chat_template(messages, tools=tools, tokenize=True, return_dict=True)["input_ids"]
    assert ours["input_ids"] == list(expected_ids)

    decode = lambda ids: hf.decode(ids)  # noqa: E731
    trained = runs(ours["input_ids"], ours["trained"], decode)
    assistants = [m for m in messages if m["role"] == "assistant"]
    assert len(trained) == len(assistants)
    for text, message in zip(trained, assistants):
        assert text.endswith(END_OF_TURN[tokenizer_name])
        content = message["content"]
        if "</think>" in content:
            content = content.split("</think>")[-1]
        assert content.strip() in text
        for call in message.get("tool_calls") or []:
            if call["function"]["name"] in decode(ours["input_ids"]):  # Llama 3's template drops tool calls
                assert call["function"]["name"] in text
    # Nothing outside the assistant turns: no user, system or tool text is trained.
    for message in messages:
        if message["role"] != "assistant" and len(message["content"].strip()) >= 4:
            assert not any(message["content"].strip() in t for t in trained)

    # Where TRL's training template renders the same text, the masks are TRL's.
    marked_ids, marked_mask = hf_masked(hf, messages, tools, training_template(tokenizer_name))
    if marked_ids == ours["input_ids"]:
        assert ours["trained"] == marked_mask
    if tokenizer_name == "llama3":
        # The original Llama 3 template differs from TRL's only by the trailing assistant header.
        assert trained == runs(marked_ids, marked_mask, decode)


def test_qwen3_earlier_turns_are_trained_as_the_template_renders_them(probe, hf_tokenizers):
    """Qwen3 writes the empty thinking block only for turns after the last user message."""
    name, messages, tools = next(c for c in CONVERSATIONS if c[0] == "multi_turn")
    ours = probe.ok(op="row", dir=str(tokenizer_dir("qwen3")), row={"messages": messages})
    hf = hf_tokenizers["qwen3"]
    assert runs(ours["input_ids"], ours["trained"], hf.decode) == [
        "Blue.<|im_end|>\n", "Green.<|im_end|>\n", "<think>\n\n</think>\n\nWhite.<|im_end|>\n"]


def test_prompt_completion_strings_train_completion_and_eos(probe, tokenizer_name, hf_tokenizers):
    """As TRL: eos appended to the completion, both encoded with special tokens, mask after the prompt."""
    hf = hf_tokenizers[tokenizer_name]
    prompt, completion = "Translate to French: cheese =>", " fromage"
    ours = probe.ok(op="row", dir=str(tokenizer_dir(tokenizer_name)), row={"prompt": prompt, "completion": completion})
    prompt_ids = hf(prompt)["input_ids"]
    full_ids = hf(prompt + completion + hf.eos_token)["input_ids"]
    assert ours["input_ids"] == full_ids
    assert ours["trained"] == [0] * len(prompt_ids) + [1] * (len(full_ids) - len(prompt_ids))
    assert hf.decode([i for i, m in zip(ours["input_ids"], ours["trained"]) if m]) == completion + hf.eos_token


def test_prompt_completion_messages_train_only_the_completion(probe, tokenizer_name, hf_tokenizers):
    hf = hf_tokenizers[tokenizer_name]
    prompt = [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"},
              {"role": "user", "content": "Bye"}]
    completion = [{"role": "assistant", "content": "Goodbye"}]
    ours = probe.ok(op="row", dir=str(tokenizer_dir(tokenizer_name)), row={"prompt": prompt, "completion": completion})
    trained = runs(ours["input_ids"], ours["trained"], hf.decode)
    assert len(trained) == 1 and "Goodbye" in trained[0] and "Hello" not in trained[0]
