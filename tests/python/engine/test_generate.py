"""The engine's generation (src/engine/generate) against transformers' `generate`: greedy
completions equal token for token on tiny random Qwen3, Qwen2 and Llama models, on a batch of
prompts of different lengths (left padding), with and without a LoRA adapter; sampling is
reproducible with a seed and differs across seeds; group_size repeats each prompt; stop ids end
a completion."""
import json

import pytest

from engine_helpers import load_hf
from test_parity import make_peft

PROMPTS = [[11, 22, 33, 44, 55, 66, 77], [5, 6, 7], [100, 200, 300, 400, 500]]


def ours_generate(job, tmp_path, model_dir, request, adapter=None, name="gen"):
    req = tmp_path / f"{name}.json"
    out = tmp_path / f"{name}.out.json"
    req.write_text(json.dumps(request))
    args = ["debug-generate", "--model", model_dir, "--request", req, "--output", out]
    if adapter:
        args += ["--adapter", adapter]
    job(*args)
    return json.loads(out.read_text())


def hf_greedy(model, prompts, max_new_tokens, pad_id):
    import torch

    width = max(len(p) for p in prompts)
    ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in prompts])
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    model.generation_config.eos_token_id = None  # run to max_new_tokens, as ours without stop ids
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=max_new_tokens, do_sample=False,
                             pad_token_id=pad_id)
    return out[:, width:].tolist()


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_greedy_generation_equals_transformers_generate(arch, tiny_models, job, tmp_path):
    folder = tiny_models(arch, sharp=True)
    model = load_hf(folder)
    want = hf_greedy(model, PROMPTS, 24, pad_id=0)
    got = ours_generate(job, tmp_path, folder, {"prompts": PROMPTS, "maxNewTokens": 24, "greedy": True, "padId": 0})
    assert got["completions"] == want
    assert got["lengths"] == [24, 24, 24] and got["terminated"] == [False, False, False]


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_greedy_generation_with_lora_equals_peft_generate(arch, tiny_models, job, tmp_path):
    folder = tiny_models(arch, sharp=True)
    pm = make_peft(load_hf(folder))
    adapter = tmp_path / "adapter"
    pm.save_pretrained(adapter)
    pm.eval()
    want = hf_greedy(pm, PROMPTS, 16, pad_id=0)
    base = ours_generate(job, tmp_path, folder, {"prompts": PROMPTS, "maxNewTokens": 16, "greedy": True}, name="base")
    got = ours_generate(job, tmp_path, folder, {"prompts": PROMPTS, "maxNewTokens": 16, "greedy": True},
                        adapter=adapter)
    assert got["completions"] == want
    assert base["completions"] != got["completions"], "the adapter changed nothing: it was not applied"


def test_sampling_is_seeded_grouped_and_stops_at_stop_ids(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3")
    req = {"prompts": PROMPTS, "maxNewTokens": 12, "temperature": 1.0, "topP": 0.95, "topK": 50, "groupSize": 4,
           "seed": 7}
    a = ours_generate(job, tmp_path, folder, req, name="a")
    b = ours_generate(job, tmp_path, folder, req, name="b")
    c = ours_generate(job, tmp_path, folder, dict(req, seed=8), name="c")
    assert len(a["completions"]) == 12
    assert a["completions"] == b["completions"], "the same seed must give the same completions"
    assert a["completions"] != c["completions"], "another seed must give other completions"
    # The group's completions of one prompt differ from each other (they are sampled, not copied).
    assert len({tuple(x) for x in a["completions"][0:4]}) > 1
    # Stop at a token the sampler emitted: that completion ends with it, and is marked terminated.
    stop = a["completions"][0][3]
    s = ours_generate(job, tmp_path, folder, dict(req, stopIds=[stop]), name="s")
    first = s["completions"][0]
    assert first == a["completions"][0][: a["completions"][0].index(stop) + 1]
    assert s["terminated"][0] is True and s["lengths"][0] == len(first)
    for comp, term in zip(s["completions"], s["terminated"]):
        assert (stop in comp) == term
        if term:
            assert comp[-1] == stop and comp.count(stop) == 1


def hf_completion_logps(model, prompt, completion, temperature):
    import torch

    ids = torch.tensor([prompt + completion])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(prompt) - 1: len(prompt) + len(completion) - 1].float()
    logp = torch.log_softmax(logits / temperature, -1)
    return logp.gather(-1, torch.tensor(completion).unsqueeze(1)).squeeze(1)


@pytest.mark.parametrize("arch,lora", [("qwen3", False), ("qwen3", True), ("llama", False), ("llama", True)])
def test_sampled_token_logprobs_equal_transformers(arch, lora, tiny_models, job, tmp_path):
    """The log-probability the generator reports for each token it sampled (batched, left-padded,
    through the key/value cache, group repeated) equals transformers' on the unpadded sequence."""
    import torch

    folder = tiny_models(arch, sharp=True)
    model = load_hf(folder)
    adapter = None
    if lora:
        model = make_peft(model)
        adapter = tmp_path / "adapter"
        model.save_pretrained(adapter)
    model.eval()
    temperature = 0.7
    req = {"prompts": PROMPTS, "maxNewTokens": 10, "temperature": temperature, "groupSize": 2, "seed": 11,
           "logprobs": True}
    got = ours_generate(job, tmp_path, folder, req, adapter=adapter)
    assert len(got["logprobs"]) == len(PROMPTS) * 2
    for i, (completion, logps) in enumerate(zip(got["completions"], got["logprobs"])):
        assert len(logps) == len(completion) == 10
        want = hf_completion_logps(model, PROMPTS[i // 2], completion, temperature)
        torch.testing.assert_close(torch.tensor(logps, dtype=torch.float32), want, rtol=1e-4, atol=1e-4,
                                   msg=f"row {i}")
    if lora:
        base = ours_generate(job, tmp_path, folder, req, name="base")
        assert base["logprobs"] != got["logprobs"], "the adapter changed nothing: it was not applied"


def hf_greedy_stop_strings(model, tok, prompt, max_new_tokens, stop_strings):
    """transformers' greedy `generate` of one prompt with stop_strings (no end-of-sequence id)."""
    import torch

    model.generation_config.eos_token_id = None
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             max_new_tokens=max_new_tokens, do_sample=False, pad_token_id=0,
                             stop_strings=stop_strings, tokenizer=tok)
    return out[0, len(prompt):].tolist()


def stop_string_inside(tok, completion, overhang):
    """A stop string the greedy completion first reaches at some token k >= 4: the last character
    before token k and token k's text, but for its last character when `overhang` (the token then
    runs past the string); with k."""
    for k in range(4, len(completion) - 2):
        before = tok.decode(completion[:k])
        upto = tok.decode(completion[:k + 1])
        piece = upto[len(before):]
        if not before or not upto.startswith(before) or len(piece) < (3 if overhang else 2):
            continue
        s = before[-1] + (piece[:-1] if overhang else piece)
        if "\ufffd" in s or not s.isprintable() or s in before:
            continue
        return s, k
    return None, None


def test_stop_strings_end_completions_as_transformers_stop_strings_do(tiny_models, job, tmp_path):
    """Greedy generation with stop strings equals transformers' `generate(stop_strings=...)` token
    for token: a completion ends at the token whose text completes a stop string, that token
    kept even when its text runs past the string; completions that reach none run on."""
    import transformers

    folder = tiny_models("qwen3", sharp=True)
    model = load_hf(folder)
    tok = transformers.AutoTokenizer.from_pretrained(folder)
    free = ours_generate(job, tmp_path, folder, {"prompts": PROMPTS, "maxNewTokens": 24, "greedy": True}, name="free")
    stops, cut = [], []
    for completion, overhang in zip(free["completions"][:2], (True, False)):  # none of the third's own
        s, k = stop_string_inside(tok, completion, overhang)
        assert s is not None, f"no usable stop string in {tok.decode(completion)!r}"
        stops.append(s)
        cut.append(k)
    got = ours_generate(job, tmp_path, folder,
                        {"prompts": PROMPTS, "maxNewTokens": 24, "greedy": True, "stopStrings": stops}, name="stop")
    for i, prompt in enumerate(PROMPTS):
        want = hf_greedy_stop_strings(model, tok, prompt, 24, stops)
        assert got["completions"][i] == want, (i, stops, tok.decode(got["completions"][i]), tok.decode(want))
        assert got["terminated"][i] == (len(want) < 24 or any(s in tok.decode(want) for s in stops))
    # The first two stop where their own string ends (or earlier, at the other's), keeping the token.
    for i in range(2):
        assert len(got["completions"][i]) <= cut[i] + 1 and got["terminated"][i]
        assert any(s in tok.decode(got["completions"][i]) for s in stops)
        assert not any(s in tok.decode(got["completions"][i][:-1]) for s in stops)
