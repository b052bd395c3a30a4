"""Streamed chat completions through trainerd and through `trainer endpoints proxy` (issue 24),
with the official `openai` client against a real trainerd serving the tiny base model with the
real `trainer-job serve`: the chunks parse with the client's own types, their text is the greedy
whole answer's, the last carries usage; an unknown model is the client's NotFoundError; a client
that hangs up mid-stream frees its KV blocks in the serving process; the proxy forwards only
POST /v1/chat/completions and stops with exit 0 on SIGINT."""
from __future__ import annotations

import json
import signal
import subprocess
import urllib.error
import urllib.request

import openai

import auth
import pytest

from cli_support import MODEL_NAME
from test_cli_endpoints import MAX_TOKENS, PROMPT, create_ready
from waiting import wait_for

MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": PROMPT}]
# A stream long enough to hang up in the middle of (the end-of-sequence token ignored).
LONG_TOKENS = 3000


def get_json(url: str, headers: dict | None = None) -> tuple[int, dict]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=60) as r:
            return r.status, json.load(r)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def metric(text: str, series: str) -> float:
    """The value of `series` (name and labels, as written) in Prometheus' text format; 0 when absent."""
    for line in text.splitlines():
        if line.startswith(series + " "):
            return float(line.split()[-1])
    return 0.0


def client_at(base_url: str) -> openai.OpenAI:
    # Through trainerd the client's key is the API token trainerd keeps for its address (tests/python/auth.py).
    return openai.OpenAI(base_url=base_url, api_key=auth.token_for(base_url) or "unused", max_retries=0, timeout=120)


@pytest.fixture(scope="module")
def endpoint(ready, trainerd):
    e = create_ready(ready)
    # The serving process answers only with the secret trainerd handed it (docs/security.md).
    e["secret"] = auth.serving_secret(trainerd.data_dir, e["endpointId"])
    yield e
    ready("endpoints", "delete", e["endpointId"], check=True)


@pytest.fixture(scope="module")
def proxy(ready, endpoint):
    """`trainer endpoints proxy ENDPOINT` on any free port: (process, its /v1 address)."""
    proc = subprocess.Popen([str(ready.binary), "endpoints", "proxy", endpoint["endpointId"][:8], "--trainer-url",
                             ready.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith(f"Proxy for endpoint {endpoint['endpointId']} listening on http://127.0.0.1:"), (
        line, proc.poll() is not None and proc.stderr.read())
    address = line.split(" listening on ")[1].split()[0]
    assert address.endswith("/v1")
    yield proc, address
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def stats(endpoint) -> dict:
    status, body = get_json(endpoint["address"] + "/stats", endpoint["secret"])
    assert status == 200, body
    return body


def addresses(ready, endpoint, proxy) -> dict[str, str]:
    return {"trainerd": f"{ready.url}/v1/endpoints/{endpoint['endpointId']}/v1", "proxy": proxy[1]}


@pytest.mark.parametrize("route", ["trainerd", "proxy"])
def test_a_stream_parses_with_the_clients_types_and_equals_the_greedy_answer(ready, endpoint, proxy, route):
    client = client_at(addresses(ready, endpoint, proxy)[route])
    whole = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=MAX_TOKENS, temperature=0)
    assert whole.choices[0].message.content, whole
    chunks = list(client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=MAX_TOKENS,
                                                 temperature=0, stream=True, stream_options={"include_usage": True}))
    assert all(isinstance(c, openai.types.chat.ChatCompletionChunk) for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == whole.choices[0].message.content
    # The same counts; the second request may take its prompt's blocks from the prefix cache.
    usage = (lambda u: (u.prompt_tokens, u.completion_tokens, u.total_tokens))  # noqa: E731
    assert chunks[-1].choices == [] and usage(chunks[-1].usage) == usage(whole.usage), chunks[-1]
    assert all(c.usage is None for c in chunks[:-1])
    assert {c.model for c in chunks} == {MODEL_NAME}
    # trainerd's meters saw the stream pass: its time to first token, its tokens between, its usage.
    with urllib.request.urlopen(ready.url + "/metrics", timeout=60) as r:
        metrics = r.read().decode()
    labels = f'{{endpoint="{endpoint["endpointId"]}",model="{MODEL_NAME}"}}'
    assert metric(metrics, "trainer_endpoint_time_to_first_token_seconds_count" + labels) >= 1, metrics
    assert metric(metrics, "trainer_endpoint_inter_token_latency_seconds_count" + labels) >= 1, metrics


@pytest.mark.parametrize("route", ["trainerd", "proxy"])
def test_an_unknown_model_through_the_stream_route_is_the_clients_not_found_error(ready, endpoint, proxy, route):
    client = client_at(addresses(ready, endpoint, proxy)[route])
    with pytest.raises(openai.NotFoundError) as caught:
        client.chat.completions.create(model="no-such-model", messages=MESSAGES, stream=True)
    assert caught.value.status_code == 404 and caught.value.code == "model_not_found", caught.value.body


@pytest.mark.parametrize("route", ["trainerd", "proxy"])
def test_a_client_that_hangs_up_mid_stream_frees_its_kv_blocks(ready, endpoint, proxy, route):
    client = client_at(addresses(ready, endpoint, proxy)[route])
    before = stats(endpoint)
    assert before["kv_blocks_used"] == 0, before
    stream = client.chat.completions.create(model=MODEL_NAME, messages=MESSAGES, max_tokens=LONG_TOKENS,
                                            temperature=0, stream=True, extra_body={"ignore_eos": True})
    pieces = 0
    for chunk in stream:
        pieces += 1 if chunk.choices and chunk.choices[0].delta.content else 0
        if pieces == 3:
            break
    during = stats(endpoint)
    assert during["kv_blocks_used"] > 0 and during["requests_running"] == 1, during
    stream.close()
    after = wait_for(lambda: (lambda s: s if s["kv_blocks_used"] == 0 else None)(stats(endpoint)), 60,
                     "the hung-up stream's KV blocks to be freed")
    assert after["requests_cancelled"] == before["requests_cancelled"] + 1, (before, after)
    assert after["requests_running"] == 0 and after["completion_tokens"] < before["completion_tokens"] + LONG_TOKENS


def test_the_proxy_answers_anything_else_with_an_openai_404_and_stops_on_sigint(ready, endpoint, proxy):
    proc, address = proxy
    with pytest.raises(openai.NotFoundError):
        client_at(address).models.list()
    status, body = get_json(address + "/models")
    assert status == 404 and body["error"]["code"] == "not_found" and "POST /v1/chat/completions" in \
        body["error"]["message"], body
    assert set(body["error"]) == {"message", "type", "param", "code"}
    status, body = get_json(address + "/chat/completions")  # GET: not forwarded either
    assert status == 404 and body["error"]["code"] == "not_found", body
    # A whole (not streamed) answer passes through too.
    answer = client_at(address).chat.completions.create(messages=MESSAGES, model=MODEL_NAME, max_tokens=MAX_TOKENS,
                                                        temperature=0)
    assert answer.usage.completion_tokens > 0
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=30) == 0, proc.stderr.read()


def test_a_proxy_for_an_unknown_endpoint_fails_naming_it(ready):
    out = ready("endpoints", "proxy", "0123abcd")
    assert out.returncode == 1 and "no endpoint" in out.stderr, out.stderr
