"""50 concurrent streaming clients, 10 of which hang up mid-stream: every other stream completes
with its finish chunk and [DONE]; the block pool holds about 16 requests at once, so the rest
wait for blocks instead of failing; and once all are done no cache block is held (GET /v1/stats)."""
import concurrent.futures
import json
import time

import pytest
import requests

from serve_support import start_serve, stop_serve

CLIENTS = 50
DISCONNECTING = 10
MAX_TOKENS = 48


@pytest.fixture(scope="module")
def server(bin_dir, served_models):
    """A small pool: 64 blocks of 16 positions, about 4 blocks per request here."""
    served = start_serve(bin_dir, served_models, "--kv-blocks", 64, "--block-size", 16, "--context-limit", 256)
    yield served
    stop_serve(served)


def stream_chat(server, i, hang_up):
    body = {"model": ["alpha", "beta", server.base_name][i % 3], "max_tokens": MAX_TOKENS, "temperature": 0.8,
            "seed": i, "stream": True, "ignore_eos": True, "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": f"Count to {i}."}]}
    with requests.post(f"{server.url}/v1/chat/completions", json=body, stream=True, timeout=300) as r:
        assert r.status_code == 200, r.text
        events = []
        for line in r.iter_lines():
            if not line:
                continue
            assert line.startswith(b"data: ")
            events.append(line[len(b"data: "):])
            if hang_up and len(events) == 3:
                return None  # closes the connection mid-stream
        return events


def test_fifty_streams_ten_hang_up_and_no_block_leaks(server):
    with concurrent.futures.ThreadPoolExecutor(CLIENTS) as pool:
        futures = [pool.submit(stream_chat, server, i, i < DISCONNECTING) for i in range(CLIENTS)]
        results = [f.result() for f in futures]
    for i, events in enumerate(results[DISCONNECTING:], start=DISCONNECTING):
        assert events[-1] == b"[DONE]", f"client {i}"
        chunks = [json.loads(e) for e in events[:-1]]
        finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
        assert finishes == ["length"], f"client {i}: {finishes}"
        assert chunks[-1]["usage"]["completion_tokens"] == MAX_TOKENS
    deadline = time.monotonic() + 60
    while True:
        stats = requests.get(f"{server.url}/v1/stats", timeout=10).json()
        if stats["kv_blocks_used"] == 0 and stats["requests_running"] == 0 and stats["requests_waiting"] == 0:
            break
        assert time.monotonic() < deadline, f"blocks still held: {stats}"
        time.sleep(0.2)
    # A client that hung up was cancelled, unless its request had produced every token already.
    assert stats["requests_finished"] >= CLIENTS - DISCONNECTING
    assert stats["requests_finished"] + stats["requests_cancelled"] == CLIENTS
    assert stats["requests_cancelled"] >= 1, "no hung-up client's request was cancelled"
