"""Chat-template parity: our rendering (minijinja behind src/engine/text) against transformers'
apply_chat_template on the npm tokenizers' own templates, as text and as token ids."""
from __future__ import annotations

import pytest

from conversations import CONVERSATIONS, PROMPTS
from models import tokenizer_dir

CASES = [(name, msgs, tools, False) for name, msgs, tools in CONVERSATIONS] + \
        [(name, msgs, tools, gen) for name, msgs, tools in PROMPTS for gen in (False, True)] + \
        [(name + "_gen", msgs[:-1], tools, True) for name, msgs, tools in CONVERSATIONS]


def hf_ids(out):
    return out["input_ids"] if hasattr(out, "keys") else out


@pytest.mark.parametrize("name,messages,tools,gen", CASES, ids=[c[0] + ("+gen" if c[3] else "") for c in CASES])
def test_render_matches_apply_chat_template(probe, tokenizer_name, hf_tokenizers, name, messages, tools, gen):
    hf = hf_tokenizers[tokenizer_name]
    folder = str(tokenizer_dir(tokenizer_name))
    expected = hf.apply_chat_template(messages, tools=tools, tokenize=False, add_generation_prompt=gen)
    ours = probe.ok(op="render", dir=folder, messages=messages, tools=tools, add_generation_prompt=gen)
    assert ours["text"] == expected
    expected_ids = hf_ids(hf.apply_chat_template(messages, tools=tools, tokenize=True, add_generation_prompt=gen))
    ids = probe.ok(op="encode", dir=folder, text=ours["text"], add_special_tokens=False)["ids"]
    assert ids == list(expected_ids)


def test_template_variables_reach_the_template(probe, hf_tokenizers):
    """Extra variables (Qwen3's enable_thinking) are passed as transformers' kwargs are."""
    hf = hf_tokenizers["qwen3"]
    messages = [{"role": "user", "content": "Hi"}]
    expected = hf.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, enable_thinking=False)
    ours = probe.ok(op="render", dir=str(tokenizer_dir("qwen3")), messages=messages, add_generation_prompt=True,
                    extra={"enable_thinking": False})
    assert ours["text"] == expected
    assert ours["text"].endswith("<think>\n\n</think>\n\n")
