"""Tool calls (issue 24): an answer in the chat format's tool-call syntax comes back as OpenAI's
`tool_calls`, whole and streamed, read with the official `openai` client's own types.

To get a real tool call out of a tiny random model, a LoRA adapter is trained here with
transformers + PEFT to answer every weather question with one `<tool_call>` block (Qwen3's
format, the prompts rendered by its own chat template with the tools), checked with
transformers' greedy `generate`, then served by `trainer-job serve`."""
from __future__ import annotations

import json

import pytest

from serve_support import start_serve, stop_serve

TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
QUESTIONS = ["What is the weather in Paris?", "Is it raining in Paris now?", "How warm is Paris today?",
             "Weather in Paris, please.", "Do I need an umbrella in Paris?", "Paris weather?"]


def train_tool_adapter(base_dir, dest):
    import peft
    import torch
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(base_dir)
    model = transformers.AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    torch.manual_seed(0)
    cfg = peft.LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, task_type="CAUSAL_LM",
                          target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    model = peft.get_peft_model(model, cfg)
    rows = []
    for q in QUESTIONS:
        prompt = tok.apply_chat_template([{"role": "user", "content": q}], tools=TOOLS, add_generation_prompt=True,
                                         tokenize=False)
        p_ids = tok(prompt, add_special_tokens=False)["input_ids"]
        t_ids = tok(CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
        rows.append((torch.tensor([p_ids + t_ids]), torch.tensor([[-100] * len(p_ids) + t_ids])))
    opt = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=3e-3)
    model.train()
    # The loss transformers computes from `labels` (each position predicts the next token, the
    # unlabelled ones ignored), with the head applied at the labelled positions only: on the CPU
    # the 151k-token head over every prompt position is most of a step's time.
    inner = model.get_base_model()
    recent = []
    for step in range(400):
        ids, labels = rows[step % len(rows)]
        hidden = inner.model(input_ids=ids).last_hidden_state[0]
        at = (labels[0, 1:] != -100).nonzero().squeeze(1)
        loss = torch.nn.functional.cross_entropy(inner.lm_head(hidden[at]).float(), labels[0, at + 1])
        opt.zero_grad()
        loss.backward()
        opt.step()
        recent = (recent + [loss.item()])[-len(rows):]
        if len(recent) == len(rows) and max(recent) < 0.02:  # every question answered with the call
            break
    model.eval()
    prompt = tok.apply_chat_template([{"role": "user", "content": QUESTIONS[0]}], tools=TOOLS,
                                     add_generation_prompt=True, tokenize=False)
    ids = tok(prompt, add_special_tokens=False, return_tensors="pt")["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=40, do_sample=False)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=True)
    assert text == CALL, f"the adapter did not learn its tool call (loss {loss.item():.4f}): {text!r}"
    model.save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def tool_server(bin_dir, served_models, tmp_path_factory):
    adapter = train_tool_adapter(served_models["base"], tmp_path_factory.mktemp("tool-adapter") / "tool")
    served = start_serve(bin_dir, served_models, "--adapter", f"tool={adapter}", "--max-adapters", 3)
    yield served
    stop_serve(served)


@pytest.fixture(scope="module")
def tool_client(tool_server):
    import openai
    return openai.OpenAI(base_url=tool_server.url + "/v1", api_key="unused", max_retries=0, timeout=120)


def ask(client, **extra):
    return client.chat.completions.create(model="tool", messages=[{"role": "user", "content": QUESTIONS[0]}],
                                          temperature=0, max_tokens=40, **extra)


def test_a_tool_call_comes_back_as_tool_calls(tool_client):
    r = ask(tool_client, tools=TOOLS)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    assert choice.message.content is None
    [call] = choice.message.tool_calls
    assert call.type == "function" and call.id.startswith("call_")
    assert call.function.name == "get_weather" and json.loads(call.function.arguments) == {"city": "Paris"}
    assert r.usage.completion_tokens > 0


def test_a_streamed_tool_call_arrives_as_tool_call_deltas(tool_client):
    chunks = list(ask(tool_client, tools=TOOLS, stream=True))
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in (c.choices[0].delta.tool_calls or [])]
    finish = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert content == "" and finish == ["tool_calls"], (content, finish)
    assert len(calls) == 1 and calls[0].index == 0 and calls[0].function.name == "get_weather"
    assert json.loads(calls[0].function.arguments) == {"city": "Paris"}


def test_with_tool_choice_none_the_call_stays_text(tool_client):
    choice = ask(tool_client, tools=TOOLS, tool_choice="none").choices[0]
    assert choice.message.tool_calls is None and choice.finish_reason == "stop", choice
    assert choice.message.content == CALL
    assert ask(tool_client).choices[0].message.tool_calls is None  # no tools offered: never parsed


def test_a_plain_answer_with_tools_offered_stays_content(tool_client, tool_server):
    r = tool_client.chat.completions.create(model=tool_server.base_name, tools=TOOLS, temperature=0, max_tokens=12,
                                            messages=[{"role": "user", "content": "Say hello."}])
    choice = r.choices[0]
    assert choice.message.tool_calls is None and choice.message.content, choice
    streamed = tool_client.chat.completions.create(model=tool_server.base_name, tools=TOOLS, temperature=0,
                                                   max_tokens=12, stream=True,
                                                   messages=[{"role": "user", "content": "Say hello."}])
    assert "".join(c.choices[0].delta.content or "" for c in streamed if c.choices) == choice.message.content
