"""An endpoint whose serving process runs on another node of a Ray cluster than trainerd's (issue
24): a head of its own at 127.0.0.1 with no CPUs, so the serving job (which asks for one) goes to
the second node, joined at 127.0.0.2 on this machine. Through the CLI the endpoint becomes READY at
that node's address, answers `endpoints send` and a streamed chat completion through trainerd's
forwarding (with an outbound.allow that names none of it: these are trainerd's calls to its own
job), and `endpoints delete` ends its Ray job and frees its claim. The serving process itself
refuses a request without the endpoint's secret (401, OpenAI's error shape)."""
from __future__ import annotations

import json
import pathlib
import tempfile
import urllib.request

import pytest

import auth
from backend_support import Service
from cli_support import MODEL_NAME, WORKLOAD
from clusters import RayHead
from waiting import wait_for

SECOND_NODE = "127.0.0.2"
MAX_TOKENS = 4


@pytest.fixture(scope="module")
def cluster(repo):
    head = RayHead.start(repo, pathlib.Path(tempfile.mkdtemp(prefix="ray2s-", dir="/tmp")), cpus=0)
    try:
        head.add_node(SECOND_NODE, cpus=1)
        yield head
    finally:
        head.stop()


@pytest.fixture
def service(bin_dir, tiny_model, tmp_path, cluster):
    svc = Service(bin_dir, tmp_path, tiny_model, {
        "compute": {"backend": "ray", "ray": {"address": cluster.address}},
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
        # Only a judge elsewhere: no rule names 127.0.0.2, which trainerd still reaches its process at.
        "outbound": {"allow": ["judge.example.com:443"]},
    }).ready()
    yield svc
    svc.close()


def streamed(url: str, body: dict) -> list[dict]:
    """The chunks of a streamed chat completion at `url` (trainerd's token sent by auth.install)."""
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=120) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream"), dict(r.headers)
        events = [e for e in r.read().decode().split("\n\n") if e]
    assert events[-1] == "data: [DONE]", events
    return [json.loads(e.removeprefix("data: ")) for e in events[:-1]]


def test_an_endpoint_served_from_the_second_node_answers_through_trainerd_and_delete_ends_it(service, cluster):
    e = service.cli.json("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--wait",
                         "--timeout", "5m")
    assert e["phase"] == "READY", e
    eid = e["endpointId"]
    # Its Ray job runs on the second node, and trainerd shows the process there.
    job = cluster.job(f"trainer-{eid}-1")
    assert job["status"] == "RUNNING" and job["driver_agent_http_address"].startswith(f"http://{SECOND_NODE}:"), job
    got = service.cli.json("endpoints", "get", eid)
    assert got["address"].startswith(f"http://{SECOND_NODE}:") and got["address"].endswith("/v1"), got
    assert "_job" not in got and "secret" not in json.dumps(got), got
    origin = got["address"].removesuffix("/v1")

    # The process refuses whoever lacks the endpoint's secret; with it, it answers.
    for token in (None, "not-the-secret"):
        status, _, body = auth.call_as(origin, "GET", "/v1/models", token)
        assert status == 401 and body["error"]["code"] == "invalid_api_key", (status, body)
        assert body["error"]["type"] == "invalid_request_error" and "secret" in body["error"]["message"], body
    secret = auth.serving_secret(service.daemon.data_dir, eid)["Authorization"].removeprefix("Bearer ")
    status, _, body = auth.call_as(origin, "GET", "/v1/models", secret)
    assert status == 200 and [m["id"] for m in body["data"]] == [MODEL_NAME], (status, body)

    # Through trainerd: a whole answer (the CLI) and a streamed one, the same greedy text.
    sent = service.cli.json("endpoints", "send", eid, "--input", "Hello", "--temperature", 0, "--max-tokens", MAX_TOKENS)
    assert sent["model"] == MODEL_NAME and 0 < sent["usage"]["completion_tokens"] <= MAX_TOKENS, sent
    chunks = streamed(f"{service.daemon.url}/v1/endpoints/{eid}/v1/chat/completions",
                      {"model": MODEL_NAME, "messages": [{"role": "user", "content": "Hello"}], "temperature": 0,
                       "max_tokens": MAX_TOKENS, "stream": True, "stream_options": {"include_usage": True}})
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks[0]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == sent["output"], (text, sent)
    assert chunks[-1]["usage"]["completion_tokens"] == sent["usage"]["completion_tokens"], chunks[-1]

    # Delete ends the Ray job on the second node and frees the claim.
    service.cli("endpoints", "delete", eid, check=True)
    wait_for(lambda: service.cli.json("endpoints", "get", eid)["phase"] == "DELETED", 120, "the endpoint to go")
    wait_for(lambda: cluster.job(f"trainer-{eid}-1")["status"] != "RUNNING", 120, "its Ray job to end")
    assert eid not in {c["owner"] for c in service.cli.json("capacity")["claims"]}
