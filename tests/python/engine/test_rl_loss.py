"""GRPO and GSPO losses and LoRA gradients of the engine (src/engine/rl/loss.cpp, through
trainer-job's hidden debug-rl-loss) against TRL 1.16's own GRPOTrainer._compute_loss, called in
the test on the same tiny model, PEFT adapter and fixed batch (prompts, completions, advantages,
old and reference log-probabilities): TRL is run, not re-derived. The per-token log-probabilities
and entropies are checked too. Every loss aggregation TRL
names (dapo, bnpo, grpo, dr_grpo), token-level (GRPO) and sequence-level (GSPO) importance
ratios, with and without the KL term, off-policy (old log-probabilities differ, so the ratio
and the clipping matter)."""
import json

import pytest

from engine_helpers import load_hf
from test_parity import make_peft


def _batch(seed=0):
    import torch

    g = torch.Generator().manual_seed(seed)
    B, P, C = 4, 6, 5
    prompt_ids = torch.randint(3, 1000, (B, P), generator=g)
    prompt_mask = torch.ones(B, P, dtype=torch.long)
    prompt_mask[1, :2] = 0  # left padding
    prompt_mask[3, :1] = 0
    prompt_ids[prompt_mask == 0] = 0
    completion_ids = torch.randint(3, 1000, (B, C), generator=g)
    completion_mask = torch.ones(B, C, dtype=torch.long)
    completion_mask[0, 3:] = 0  # right padding after the end of sequence
    completion_mask[2, 4:] = 0
    advantages = torch.tensor([1.2, -0.7, 0.4, -0.9])
    return prompt_ids, prompt_mask, completion_ids, completion_mask, advantages


def _trl_trainer(pm, folder, loss_type, sequence, beta, clip_low, clip_high, max_len, tmp_path):
    import datasets
    import transformers
    from trl import GRPOConfig, GRPOTrainer

    tok = transformers.AutoTokenizer.from_pretrained(folder)
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    args = GRPOConfig(output_dir=str(tmp_path / "trl"), use_cpu=True, bf16=False, report_to=[],
                      per_device_train_batch_size=4, num_generations=2, max_completion_length=max_len,
                      loss_type=loss_type, importance_sampling_level="sequence" if sequence else "token",
                      beta=beta, epsilon=clip_low, epsilon_high=clip_high, temperature=1.0, logging_steps=1)
    ds = datasets.Dataset.from_list([{"prompt": "hi"}] * 4)
    trainer = GRPOTrainer(model=pm, reward_funcs=[lambda completions, **kw: [0.0] * len(completions)], args=args,
                          train_dataset=ds, processing_class=tok)
    trainer.current_gradient_accumulation_steps = 1
    return trainer


CASES = [(agg, method, beta) for agg in ["dapo", "bnpo", "grpo", "dr_grpo"] for method in ["grpo", "gspo"]
         for beta in [0.0, 0.05]]


@pytest.mark.parametrize("agg,method,beta", CASES)
def test_loss_and_lora_gradients_equal_trl(agg, method, beta, tiny_models, job, tmp_path):
    import safetensors.torch
    import torch

    folder = tiny_models("qwen3", sharp=True)
    pm = make_peft(load_hf(folder))
    adapter = tmp_path / "adapter"
    pm.save_pretrained(adapter)
    prompt_ids, prompt_mask, completion_ids, completion_mask, adv = _batch()
    clip_low, clip_high, max_len = 0.2, 0.28, 8
    trainer = _trl_trainer(pm, folder, agg, method == "gspo", beta, clip_low, clip_high, max_len, tmp_path)
    model = trainer.model
    model.train()
    # Old and reference log-probabilities off the current ones, so ratios leave the clip range.
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        ids = torch.cat([prompt_ids, completion_ids], 1)
        mask = torch.cat([prompt_mask, completion_mask], 1)
        cur, entropies, _ = trainer._get_per_token_logps_and_entropies(model, ids, mask, completion_ids.size(1),
                                                                       compute_entropy=True)
    old = cur + 0.3 * torch.randn(cur.shape, generator=g)
    ref = cur + 0.2 * torch.randn(cur.shape, generator=g)
    inputs = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
              "completion_mask": completion_mask, "advantages": adv, "old_per_token_logps": old,
              "num_items_in_batch": completion_mask.sum()}
    if beta:
        inputs["ref_per_token_logps"] = ref
    model.zero_grad()
    want = trainer._compute_loss(model, inputs)
    want.backward()
    want_grads = {n.replace(".default", ""): p.grad.detach().clone() for n, p in model.named_parameters()
                  if "lora_" in n and p.grad is not None}

    tensors = {"prompt_ids": prompt_ids, "prompt_mask": prompt_mask, "completion_ids": completion_ids,
               "completion_mask": completion_mask, "advantages": adv.float(), "old_logps": old.float().contiguous()}
    if beta:
        tensors["ref_logps"] = ref.float().contiguous()
    safetensors.torch.save_file(tensors, tmp_path / "in.safetensors")
    (tmp_path / "s.json").write_text(json.dumps({"method": method, "lossAggregation": agg, "clipLow": clip_low,
                                                 "clipHigh": clip_high, "klBeta": beta, "maxCompletionLength": max_len}))
    job("debug-rl-loss", "--model", folder, "--adapter", adapter, "--inputs", tmp_path / "in.safetensors",
        "--settings", tmp_path / "s.json", "--output", tmp_path / "out.safetensors")
    ours = safetensors.torch.load_file(tmp_path / "out.safetensors")
    m = completion_mask.bool()  # padded completion positions are masked out of every loss
    torch.testing.assert_close(ours["logps"][m], cur[m], rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(ours["entropy"][m], entropies[m], rtol=1e-4, atol=1e-5)
    # Past a completion's end nothing went through the head (masked_token_logps): 0, not a value.
    assert (ours["logps"][~m] == 0).all() and (ours["entropy"][~m] == 0).all()
    torch.testing.assert_close(ours["loss"], want.detach().float(), rtol=1e-4, atol=1e-6)
    assert want_grads, "TRL produced no LoRA gradient"
    for name, grad in want_grads.items():
        torch.testing.assert_close(ours["grad." + name], grad, rtol=1e-3, atol=1e-6, msg=name)
