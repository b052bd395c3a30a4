"""Chat templates of many Hub models (the copies TRL ships in trl/chat_templates: Qwen 2.5/3,
Llama 3.x, Gemma, Phi, DeepSeek, GPT-OSS, Cohere, GLM, LFM, SmolVLM, ...), rendered by us and by
transformers' apply_chat_template(chat_template=...) on the sample conversations: same text, or
both refuse the conversation."""
from __future__ import annotations

import json
import pathlib

import pytest

from conversations import CONVERSATIONS, PROMPTS


def hub_templates() -> list[pathlib.Path]:
    import trl

    return sorted((pathlib.Path(trl.__file__).parent / "chat_templates").glob("*.jinja"))


# Multimodal templates read content as a list of parts.
PARTS = [{"role": "user", "content": [{"type": "text", "text": "Describe the sky."}]},
         {"role": "assistant", "content": [{"type": "text", "text": "Blue and clear."}]}]

SPECIAL = {"bos_token": "<s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "<unk>"}


@pytest.fixture(scope="module")
def template_folders(tmp_path_factory):
    """A folder per template with a tiny word-level tokenizer (the template is what is tested)."""
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel

    out = {}
    for path in hub_templates():
        folder = tmp_path_factory.mktemp(path.stem)
        tok = Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>"))
        tok.add_special_tokens(list(SPECIAL.values()))
        tok.save(str(folder / "tokenizer.json"))
        (folder / "tokenizer_config.json").write_text(json.dumps({**SPECIAL, "chat_template": path.read_text(),
                                                                   "tokenizer_class": "PreTrainedTokenizerFast"}))
        out[path.stem] = folder
    return out


@pytest.mark.parametrize("template", [p.stem for p in hub_templates()])
def test_hub_template_matches_transformers(probe, template_folders, template):
    from transformers import AutoTokenizer

    folder = template_folders[template]
    hf = AutoTokenizer.from_pretrained(str(folder))
    cases = [(m, t, False) for _, m, t in CONVERSATIONS] + [(m, t, True) for _, m, t in PROMPTS] + [(PARTS, None, False)]
    rendered = 0
    for messages, tools, gen in cases:
        try:
            expected = hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
        except Exception as e:  # the template refuses this conversation (raise_exception, missing field)
            answer = probe.ask(op="render", dir=str(folder), messages=messages, tools=tools, add_generation_prompt=gen)
            assert "error" in answer, f"transformers raised {e!r} but we rendered {answer.get('text')!r}"
            continue
        ours = probe.ok(op="render", dir=str(folder), messages=messages, tools=tools, add_generation_prompt=gen)
        assert ours["text"] == expected, (messages, tools, gen)
        rendered += 1
    assert rendered > 0


def training_templates() -> list[pathlib.Path]:
    return [p for p in hub_templates() if "{% generation %}" in p.read_text() or "{%- generation %}" in p.read_text()]


@pytest.mark.parametrize("template", [p.stem for p in training_templates()])
def test_hub_generation_masks_match_transformers(probe, tmp_path, hf_tokenizers, template):
    """Assistant masks from {% generation %} blocks of TRL's training templates, under Qwen3's
    tokenizer: ids and masks equal transformers' return_assistant_tokens_mask."""
    from models import tokenizer_dir

    source = next(p for p in training_templates() if p.stem == template).read_text()
    hf = hf_tokenizers["qwen3"]
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_dir("qwen3") / "tokenizer.json")
    config = json.loads((tokenizer_dir("qwen3") / "tokenizer_config.json").read_text())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": source}))
    compared = 0
    for _, messages, tools in CONVERSATIONS + [("parts", PARTS, None)]:
        try:
            out = hf.apply_chat_template(messages, tools=tools, chat_template=source, tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
        except Exception:
            continue
        row = {"messages": messages, **({"tools": tools} if tools else {})}
        ours = probe.ok(op="row", dir=str(tmp_path), row=row)
        assert ours["input_ids"] == list(out["input_ids"])
        assert ours["trained"] == list(out["assistant_masks"])
        compared += 1
    assert compared > 0
