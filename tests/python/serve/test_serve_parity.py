"""Greedy completions served by `trainer-job serve` equal transformers + PEFT greedy `generate`
token for token: for the base model and two adapters, each alone, and all three in one batch
under concurrent load (rows of different adapters share the base model's matrices and add their
own low-rank products). Token ids come back in `choices[].token_ids` (`return_token_ids`, as
vLLM's extension). Greedy picks go through the bf16-screened head where the CPU has native bf16
(`/v1/stats` says which, and how many rows it picked); the same batch through the fp32 head
(`--greedy-head fp32`) equals the references too."""
import concurrent.futures
import pathlib
import subprocess

import pytest
import requests
from serve_support import start_serve, stop_serve

PROMPTS = [[11, 22, 33, 44, 55, 66, 77], [5, 6, 7], [100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1100]]
NEW_TOKENS = 20


def reference(served_models, name, prompts, max_new_tokens):
    """Greedy generate of transformers (with the PEFT adapter `name`, or the base), one prompt at
    a time, running to max_new_tokens."""
    import peft
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(served_models["base"], dtype=torch.float32)
    if name != "base":
        model = peft.PeftModel.from_pretrained(model, served_models[name])
    model.eval()
    model.generation_config.eos_token_id = None  # ours is asked to ignore eos (ignore_eos)
    out = []
    with torch.no_grad():
        for p in prompts:
            ids = torch.tensor([p])
            gen = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=max_new_tokens,
                                 do_sample=False, pad_token_id=0)
            out.append(gen[0, len(p):].tolist())
    return out


@pytest.fixture(scope="module")
def references(served_models):
    return {name: reference(served_models, name, PROMPTS, NEW_TOKENS) for name in ("base", "alpha", "beta")}


def ours(server, model, prompt):
    r = requests.post(f"{server.url}/v1/completions", json={
        "model": model, "prompt": prompt, "max_tokens": NEW_TOKENS, "temperature": 0, "ignore_eos": True,
        "return_token_ids": True}, timeout=120)
    assert r.status_code == 200, r.text
    body = r.json()
    choice = body["choices"][0]
    assert choice["finish_reason"] == "length"
    usage = body["usage"]
    assert (usage["prompt_tokens"], usage["completion_tokens"], usage["total_tokens"]) == \
        (len(prompt), NEW_TOKENS, len(prompt) + NEW_TOKENS)
    return choice["token_ids"]


def model_name(server, name):
    return server.base_name if name == "base" else name


def test_adapters_change_the_reference(references):
    assert references["alpha"] != references["base"] and references["beta"] != references["base"]
    assert references["alpha"] != references["beta"]


@pytest.mark.parametrize("name", ["base", "alpha", "beta"])
def test_greedy_alone_equals_transformers_and_peft(server, references, name):
    for prompt, want in zip(PROMPTS, references[name]):
        assert ours(server, model_name(server, name), prompt) == want


def cpu_has_native_bf16() -> bool:
    flags = pathlib.Path("/proc/cpuinfo").read_text()
    return " avx512_bf16" in flags or " amx_bf16" in flags


def three_models_in_one_batch(server, references):
    # Every (model, prompt) pair four times, all sent at once: the scheduler decodes them together.
    jobs = [(name, i) for name in ("base", "alpha", "beta") for i in range(len(PROMPTS))] * 4
    with concurrent.futures.ThreadPoolExecutor(len(jobs)) as pool:
        futures = {pool.submit(ours, server, model_name(server, n), PROMPTS[i]): (n, i) for n, i in jobs}
        for f, (name, i) in futures.items():
            assert f.result() == references[name][i], f"{name} prompt {i}"
    stats = requests.get(f"{server.url}/v1/stats", timeout=10).json()
    assert stats["kv_blocks_used"] == 0
    return stats


def test_greedy_three_models_in_one_batch_equal_transformers_and_peft(server, references):
    stats = three_models_in_one_batch(server, references)
    if cpu_has_native_bf16():
        # Every pick of the batch was screened (one per completion token), each settled exactly.
        assert stats["greedy_head"] == "screened", stats
        assert stats["greedy_rows_screened"] >= 36 * NEW_TOKENS, stats
        assert stats["greedy_candidates"] >= stats["greedy_rows_screened"] - stats["greedy_rows_fp32"], stats
    else:
        assert stats["greedy_head"] == "fp32" and stats["greedy_rows_screened"] == 0, stats


def test_greedy_through_the_fp32_head_equals_transformers_and_peft(bin_dir, served_models, references):
    served = start_serve(bin_dir, served_models, "--greedy-head", "fp32", "--context-limit", 512)
    try:
        stats = three_models_in_one_batch(served, references)
        assert stats["greedy_head"] == "fp32" and stats["greedy_rows_screened"] == 0, stats
        bad = requests.post(f"{served.url}/v1/completions", json={"model": "alpha", "prompt": [1]}, timeout=30)
        assert bad.status_code == 200, bad.text  # the server stays usable for sampling too
    finally:
        stop_serve(served)


def test_an_unknown_greedy_head_is_refused_by_name(bin_dir, served_models):
    out = subprocess.run([str(bin_dir / "trainer-job"), "serve", "--model", str(served_models["base"]),
                          "--greedy-head", "bf16"], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0 and "--greedy-head must be screened or fp32, got 'bf16'" in out.stderr, out.stderr


def test_a_sampled_row_among_greedy_rows_draws_what_it_draws_alone(server, references):
    # Greedy rows take the screened head and a sampling row the fp32 logits, in the same pass.
    body = {"model": "alpha", "prompt": PROMPTS[0], "max_tokens": NEW_TOKENS, "temperature": 1.5, "seed": 9,
            "ignore_eos": True, "return_token_ids": True}

    def sampled():
        r = requests.post(f"{server.url}/v1/completions", json=body, timeout=120)
        assert r.status_code == 200, r.text
        return r.json()["choices"][0]["token_ids"]

    alone = sampled()
    jobs = [(name, i) for name in ("base", "alpha", "beta") for i in range(len(PROMPTS))] * 4
    with concurrent.futures.ThreadPoolExecutor(len(jobs) + 1) as pool:
        greedy = [pool.submit(ours, server, model_name(server, n), PROMPTS[i]) for n, i in jobs]
        mixed = pool.submit(sampled)
        assert mixed.result() == alone
        assert [f.result() for f in greedy] == [references[n][i] for n, i in jobs]
