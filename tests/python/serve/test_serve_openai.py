"""`trainer-job serve` through the official `openai` Python client: plain and streaming chat
completions (with usage), `n` choices, raw completions, /v1/models, adapters attached and
detached at run time, and OpenAI-shaped errors for bad input (the client raises its own error
types, parsed from our bodies)."""
import openai
import pytest
import requests

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hello."}]


@pytest.fixture()
def client(server):
    return openai.OpenAI(base_url=f"{server.url}/v1", api_key="unused", max_retries=0, timeout=120)


def test_models_lists_the_base_model_and_its_adapters(client, server):
    ids = [m.id for m in client.models.list().data]
    assert ids == [server.base_name, "alpha", "beta"]


def test_chat_completion_renders_the_chat_template_and_counts_usage(client, server, served_models):
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(served_models["base"])
    prompt_ids = tok.apply_chat_template(MESSAGES, add_generation_prompt=True, tokenize=True)
    if isinstance(prompt_ids, dict) or hasattr(prompt_ids, "input_ids"):
        prompt_ids = prompt_ids["input_ids"]
    r = client.chat.completions.create(model="alpha", messages=MESSAGES, max_tokens=12, temperature=0)
    assert r.object == "chat.completion" and r.model == "alpha"
    assert len(r.choices) == 1 and r.choices[0].message.role == "assistant"
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.prompt_tokens == len(prompt_ids)
    assert 1 <= r.usage.completion_tokens <= 12
    assert r.usage.total_tokens == r.usage.prompt_tokens + r.usage.completion_tokens
    # The same greedy request through /v1/completions on the rendered prompt gives the same text.
    raw = client.completions.create(model="alpha", prompt=prompt_ids, max_tokens=12, temperature=0)
    assert raw.choices[0].text == r.choices[0].message.content


def test_streaming_chat_yields_the_same_text_and_usage_last(client):
    whole = client.chat.completions.create(model="beta", messages=MESSAGES, max_tokens=16, temperature=0)
    chunks = list(client.chat.completions.create(model="beta", messages=MESSAGES, max_tokens=16, temperature=0,
                                                 stream=True, stream_options={"include_usage": True}))
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == [whole.choices[0].finish_reason]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == whole.usage.completion_tokens
    assert all(c.usage is None for c in chunks[:-1])


def test_a_long_sampled_stream_equals_the_whole_answer_character_for_character(client, server):
    """300 tokens drawn at temperature 2 from the whole vocabulary: multi-byte characters, some split
    across tokens. The stream decodes incrementally (only the new tokens each time); what it sends
    must still be exactly the whole answer's text, with no broken character in between."""
    kwargs = dict(model=server.base_name, prompt=[5, 6, 7], max_tokens=300, temperature=2.0, seed=11,
                  extra_body={"ignore_eos": True})
    whole = client.completions.create(**kwargs).choices[0].text
    pieces = [c.choices[0].text for c in client.completions.create(stream=True, **kwargs) if c.choices]
    assert "".join(pieces) == whole
    assert any(ord(ch) > 0x7F for ch in whole), f"the sample holds no multi-byte character: {whole!r}"
    assert len([p for p in pieces if p]) > 50, "the text arrived in many pieces"


def test_n_choices_are_seeded_and_distinct(client, server):
    kwargs = dict(model=server.base_name, messages=MESSAGES, max_tokens=10, temperature=2.0, seed=5, n=4)
    a = client.chat.completions.create(**kwargs)
    b = client.chat.completions.create(**kwargs)
    assert [c.index for c in a.choices] == [0, 1, 2, 3]
    texts = [c.message.content for c in a.choices]
    assert texts == [c.message.content for c in b.choices], "the same seed must give the same choices"
    assert len(set(texts)) > 1, "the choices are sampled apart"
    assert 4 <= a.usage.completion_tokens <= 40


def test_stop_string_ends_the_text_before_it(client, server):
    full = client.completions.create(model=server.base_name, prompt=[5, 6, 7], max_tokens=20, temperature=0,
                                     extra_body={"ignore_eos": True})
    text = full.choices[0].text
    stop = text[len(text) // 2: len(text) // 2 + 2]
    assert stop.strip(), f"pick a visible stop string from {text!r}"
    cut = client.completions.create(model=server.base_name, prompt=[5, 6, 7], max_tokens=20, temperature=0,
                                    stop=[stop], extra_body={"ignore_eos": True})
    assert cut.choices[0].finish_reason == "stop"
    assert cut.choices[0].text == text[:text.index(stop)]


def test_unknown_model_is_404_model_not_found(client):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="nope", messages=MESSAGES)
    assert e.value.status_code == 404
    assert e.value.code == "model_not_found" and "nope" in e.value.message


def test_prompt_over_the_context_limit_is_400_naming_the_limit(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.base_name, prompt=[7] * 600, max_tokens=4)
    assert "512" in e.value.message
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model="alpha", messages=[{"role": "user", "content": "word " * 2000}])
    assert "512" in e.value.message


def test_max_tokens_absurdly_large_is_400(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.base_name, messages=MESSAGES, max_tokens=10**9)
    assert "512" in e.value.message and e.value.param == "max_tokens"


def test_n_absurdly_large_is_400(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=server.base_name, messages=MESSAGES, n=10**6)
    assert e.value.param == "n"


def test_malformed_json_is_400_with_openais_error_shape(server):
    r = requests.post(f"{server.url}/v1/chat/completions", data=b"{not json", timeout=10,
                      headers={"Content-Type": "application/json"})
    assert r.status_code == 400
    err = r.json()["error"]
    assert err["type"] == "invalid_request_error" and err["code"] == "invalid_json" and err["message"]


def test_adapters_attach_and_detach_at_run_time(client, server, served_models):
    r = requests.post(f"{server.url}/v1/adapters", json={"name": "gamma", "path": str(served_models["alpha"])},
                      timeout=60)
    assert r.status_code == 201, r.text
    assert "gamma" in [m.id for m in client.models.list().data]
    a = client.completions.create(model="alpha", prompt=[5, 6, 7], max_tokens=8, temperature=0)
    g = client.completions.create(model="gamma", prompt=[5, 6, 7], max_tokens=8, temperature=0)
    assert g.choices[0].text == a.choices[0].text  # the same folder under another name
    again = requests.post(f"{server.url}/v1/adapters", json={"name": "gamma", "path": str(served_models["beta"])},
                          timeout=60)
    assert again.status_code == 409 and "already attached" in again.json()["error"]["message"]
    assert requests.delete(f"{server.url}/v1/adapters/gamma", timeout=10).status_code == 200
    assert "gamma" not in [m.id for m in client.models.list().data]
    with pytest.raises(openai.NotFoundError):
        client.completions.create(model="gamma", prompt=[5, 6, 7], max_tokens=2)
    gone = requests.delete(f"{server.url}/v1/adapters/gamma", timeout=10)
    assert gone.status_code == 404


def test_ten_megabyte_prompt_is_400_and_disturbs_nothing(client, server):
    with pytest.raises(openai.BadRequestError) as e:
        client.completions.create(model=server.base_name, prompt="word " * (2 * 1024 * 1024), max_tokens=4)
    assert "512" in e.value.message and e.value.param == "prompt"
    after = client.completions.create(model="alpha", prompt=[5, 6, 7], max_tokens=4, temperature=0)
    assert after.choices[0].finish_reason in ("stop", "length")
