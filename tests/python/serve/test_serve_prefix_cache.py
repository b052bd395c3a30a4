"""Prefix sharing in `trainer-job serve`: prompts that start with the same full KV blocks (a
common system prompt) reuse the blocks an earlier prompt computed, for the same model or adapter
only; the answers stay equal to transformers + PEFT greedy `generate`; OpenAI's
`usage.prompt_tokens_details.cached_tokens` and `/v1/stats` say how much was reused; cached
blocks nobody holds are taken back when a request needs the room; `--prefix-cache off` reuses
nothing."""
import requests

from serve_support import start_serve, stop_serve
from test_serve_parity import model_name, reference

NEW_TOKENS = 12
SHARED = [(7 * i + 3) % 900 + 10 for i in range(48)]  # 3 blocks of 16: the "system prompt"
PROMPTS = [SHARED + [101, 102, 103, 104, 105], SHARED + [201, 202], SHARED + [301, 302, 303, 304, 305, 306, 307]]


def complete(served, model, prompt, max_tokens=NEW_TOKENS):
    r = requests.post(f"{served.url}/v1/completions", json={
        "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    return body["choices"][0]["token_ids"], body["usage"]["prompt_tokens_details"]["cached_tokens"]


def stats(served):
    return requests.get(f"{served.url}/v1/stats", timeout=10).json()


def test_shared_prefix_is_reused_per_model_and_answers_stay_exact(bin_dir, served_models):
    refs = {name: reference(served_models, name, PROMPTS, NEW_TOKENS) for name in ("base", "alpha")}
    served = start_serve(bin_dir, served_models, "--kv-blocks", 64, "--block-size", 16, "--context-limit", 256)
    try:
        for name in ("base", "alpha"):
            model = model_name(served, name)
            cached = []
            for prompt, want in zip(PROMPTS, refs[name]):
                got, n = complete(served, model, prompt)
                assert got == want, f"{name}: prompt of {len(prompt)} tokens"
                cached.append(n)
            # The first prompt of each model computes the shared blocks (alpha's own: an adapter
            # changes every layer's keys and values); the later ones reuse all three.
            assert cached == [0, 48, 48], f"{name}: {cached}"
        s = stats(served)
        assert s["kv_blocks_used"] == 0
        assert s["kv_blocks_cached"] >= 6  # three shared blocks for each model, kept after the requests
        assert s["prompt_tokens_cached"] == 4 * 48
    finally:
        stop_serve(served)


def test_cached_blocks_give_way_to_a_request_that_needs_the_room(bin_dir, served_models):
    served = start_serve(bin_dir, served_models, "--kv-blocks", 8, "--block-size", 16, "--context-limit", 128)
    try:
        for prompt in PROMPTS[:2]:
            complete(served, served.base_name, prompt)
        assert stats(served)["kv_blocks_cached"] >= 3
        # 100 prompt tokens + 28 completion tokens: all 8 blocks, so every cached one is taken back.
        long_prompt = [(11 * i + 5) % 900 + 10 for i in range(100)]
        ids, cached = complete(served, served.base_name, long_prompt, max_tokens=28)
        assert len(ids) == 28 and cached == 0
        s = stats(served)
        assert s["kv_blocks_used"] == 0
        # And the shared prefix is computed again, then reused again.
        assert complete(served, served.base_name, PROMPTS[0])[1] == 0
        assert complete(served, served.base_name, PROMPTS[1])[1] == 48
    finally:
        stop_serve(served)


def test_prefix_cache_off_reuses_nothing(bin_dir, served_models):
    served = start_serve(bin_dir, served_models, "--kv-blocks", 64, "--block-size", 16, "--prefix-cache", "off")
    try:
        assert [complete(served, served.base_name, p)[1] for p in PROMPTS] == [0, 0, 0]
        s = stats(served)
        assert s["kv_blocks_cached"] == 0 and s["prompt_tokens_cached"] == 0
    finally:
        stop_serve(served)
