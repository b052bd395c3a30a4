"""Logits, loss and LoRA gradients of the native engine against transformers and PEFT, on the
same tiny random weights (fp32, CPU). Tolerances: 1e-4 absolute on logits, 1e-5 on the loss,
1e-4 relative to the largest entry on each LoRA gradient."""
import pytest
import torch
from safetensors.torch import load_file, save_file

from engine_helpers import load_hf

LOGIT_ATOL = 1e-4


def forward(job, tmp_path, model_dir, inputs, adapter=None, grads=False, precision="FP32"):
    src, dst = tmp_path / "inputs.safetensors", tmp_path / "out.safetensors"
    save_file({k: v.contiguous() for k, v in inputs.items()}, str(src))
    args = ["debug-forward", "--model", model_dir, "--inputs", src, "--output", dst, "--precision", precision]
    if adapter:
        args += ["--adapter", adapter]
    if grads:
        args.append("--grads")
    job(*args)
    return load_file(str(dst))


def sample_inputs(vocab, batch=2, length=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (batch, length), generator=g)
    labels = ids.clone()
    labels[:, : length // 3] = -100  # an untrained prompt, as SFT has
    return ids, labels


def make_peft(model, seed=0, targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")):
    import peft

    torch.manual_seed(seed)
    cfg = peft.LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=list(targets),
                          init_lora_weights=False, task_type="CAUSAL_LM")  # B random, so the adapter matters
    return peft.get_peft_model(model, cfg)


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_logits_match_transformers(arch, tiny_models, job, tmp_path):
    folder = tiny_models(arch, sharp=True)
    hf = load_hf(folder)
    ids, labels = sample_inputs(hf.config.vocab_size)
    with torch.no_grad():
        ref = hf(input_ids=ids, labels=labels)
    ours = forward(job, tmp_path, folder, {"input_ids": ids, "labels": labels})
    assert ours["logits"].shape == ref.logits.shape
    diff = (ours["logits"] - ref.logits).abs().max().item()
    assert diff < LOGIT_ATOL, f"{arch}: max |logit diff| {diff}"
    assert abs(ours["loss"].item() - ref.loss.item()) < 1e-5


@pytest.mark.parametrize("arch", ["qwen3", "qwen2", "llama"])
def test_lora_logits_loss_and_gradients_match_peft(arch, tiny_models, job, tmp_path):
    folder = tiny_models(arch, sharp=True)
    pm = make_peft(load_hf(folder))
    adapter = tmp_path / "adapter"
    pm.save_pretrained(adapter)
    ids, labels = sample_inputs(pm.config.vocab_size, seed=1)
    out = pm(input_ids=ids, labels=labels)
    out.loss.backward()
    ours = forward(job, tmp_path, folder, {"input_ids": ids, "labels": labels}, adapter=adapter, grads=True)
    diff = (ours["logits"] - out.logits.detach()).abs().max().item()
    assert diff < LOGIT_ATOL, f"{arch}+LoRA: max |logit diff| {diff}"
    assert abs(ours["loss"].item() - out.loss.item()) < 1e-5
    checked = 0
    for name, p in pm.named_parameters():
        if "lora_" not in name:
            continue
        key = "grad." + name.replace(".default", "")
        assert key in ours, f"missing {key}"
        ref = p.grad
        scale = ref.abs().max().item() + 1e-12
        err = (ours[key] - ref).abs().max().item()
        assert err <= 1e-4 * scale + 1e-7, f"{key}: max |grad diff| {err} (max |grad| {scale})"
        checked += 1
    assert checked == 2 * 7 * pm.config.num_hidden_layers


def test_right_padded_batch_matches_unpadded_rows(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3", sharp=True)
    hf = load_hf(folder)
    ids, _ = sample_inputs(hf.config.vocab_size, batch=2, length=10, seed=2)
    lengths = [10, 6]
    padded = ids.clone()
    padded[1, 6:] = 0
    ours = forward(job, tmp_path, folder, {"input_ids": padded})
    with torch.no_grad():
        for row, n in enumerate(lengths):
            ref = hf(input_ids=ids[row : row + 1, :n]).logits[0]
            diff = (ours["logits"][row, :n] - ref).abs().max().item()
            assert diff < LOGIT_ATOL, f"row {row}: {diff}"


def test_packed_rows_do_not_attend_to_each_other(tiny_models, job, tmp_path):
    folder = tiny_models("llama", sharp=True)
    hf = load_hf(folder)
    ids, _ = sample_inputs(hf.config.vocab_size, batch=1, length=12, seed=3)
    cuts = [(0, 5), (5, 12)]  # two rows packed into one sequence
    positions = torch.cat([torch.arange(b - a) for a, b in cuts]).unsqueeze(0)
    sequence_ids = torch.cat([torch.full((b - a,), i) for i, (a, b) in enumerate(cuts)]).unsqueeze(0)
    ours = forward(job, tmp_path, folder, {"input_ids": ids, "position_ids": positions, "sequence_ids": sequence_ids})
    with torch.no_grad():
        for a, b in cuts:
            ref = hf(input_ids=ids[:, a:b]).logits[0]
            diff = (ours["logits"][0, a:b] - ref).abs().max().item()
            assert diff < LOGIT_ATOL, f"packed row [{a}, {b}): {diff}"


def test_bf16_logits_follow_transformers_bf16(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3")
    hf = load_hf(folder, dtype="bfloat16")
    ids, labels = sample_inputs(hf.config.vocab_size, seed=4)
    with torch.no_grad():
        ref = hf(input_ids=ids, labels=labels)
    ours = forward(job, tmp_path, folder, {"input_ids": ids, "labels": labels}, precision="BF16")
    diff = (ours["logits"] - ref.logits.float()).abs().max().item()
    assert diff < 2e-2, f"bf16: max |logit diff| {diff}"
    assert abs(ours["loss"].item() - ref.loss.item()) < 1e-2
