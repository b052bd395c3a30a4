"""LoRA SFT through `trainer-job run`: a learnable task lowers the validation loss, the same
seed gives the same losses, the adapter we save loads in PEFT and reproduces our logits, and
`trainer-job score` agrees with transformers + PEFT on the saved adapter."""
import json
import math
import pathlib

import pytest
import torch

from engine_helpers import load_hf, write_jsonl

COLORS = ["red", "green", "blue", "yellow", "purple", "orange", "black", "white"]


def task_rows(n, seed=0):
    """A learnable task: the assistant repeats the color the user names, in a fixed phrase."""
    g = torch.Generator().manual_seed(seed)
    rows = []
    for _ in range(n):
        color = COLORS[torch.randint(0, len(COLORS), (1,), generator=g).item()]
        rows.append({"messages": [{"role": "user", "content": f"Which color? {color}"},
                                  {"role": "assistant", "content": f"The color is {color}."}]})
    return rows


def plan_for(model_dir, data, **training):
    hp_training = {"maxSteps": 24, "batchSize": 4, "validationSplit": 0.25, "seed": 7,
                   "validationFrequencySteps": 12}
    hp_training.update(training)
    return {
        "kind": "run",
        "workload": "engine-test",
        "baseModel": str(model_dir),
        "config": {
            "dataset": str(data),
            "method": "sft",
            "hyperparams": {
                "lora": {"rank": 8, "alpha": 16, "dropout": 0.05},
                "optimizer": {"learningRate": 0.02, "warmupSteps": 2, "schedule": "cosine"},
                "training": hp_training,
            },
            "maxSeqLength": 64,
            "model": {"precision": "FP32"},
        },
        "execution": {"gpus": 0},
    }


def train(job, tmp_path, name, plan):
    plan_path = tmp_path / f"{name}.json"
    plan_path.write_text(json.dumps(plan))
    out = tmp_path / name
    events_path = tmp_path / f"{name}.events"
    proc = job("run", "--plan", plan_path, "--output", out, "--events", events_path, check=False)
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert proc.returncode == 0, proc.stderr + "\n" + "\n".join(map(str, events[-3:]))
    return out, events, proc


@pytest.fixture(scope="module")
def trained(tiny_models, job, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sft")
    data = write_jsonl(tmp / "train.jsonl", task_rows(64))
    plan = plan_for(tiny_models("qwen3", sharp=True), data)
    first = train(job, tmp, "a", plan)
    second = train(job, tmp, "b", plan)
    return dict(tmp=tmp, data=data, plan=plan, first=first, second=second, model=tiny_models("qwen3", sharp=True))


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def test_training_lowers_the_validation_loss_clearly(trained):
    _, events, proc = trained["first"]
    val = [e["validationLoss"] for e in of_type(events, "validation")]
    steps = of_type(events, "step")
    assert len(steps) == 24 and [e["step"] for e in steps] == list(range(1, 25))
    assert len(val) == 2, val  # at step 12 and at the end
    first_loss = steps[0]["loss"]
    assert val[-1] < 0.25 * first_loss, f"validation {val} vs first training loss {first_loss}"
    assert val[-1] < val[0]
    assert steps[-1]["tokenAccuracy"] > steps[0]["tokenAccuracy"]
    assert "step 24/24" in proc.stderr and "ETA" in proc.stderr


def test_same_seed_gives_identical_losses(trained):
    a = [e["loss"] for e in of_type(trained["first"][1], "step")]
    b = [e["loss"] for e in of_type(trained["second"][1], "step")]
    assert a == b
    va = [e["validationLoss"] for e in of_type(trained["first"][1], "validation")]
    vb = [e["validationLoss"] for e in of_type(trained["second"][1], "validation")]
    assert va == vb


def test_events_follow_the_job_protocol(trained):
    events = trained["first"][1]
    kinds = [e["type"] for e in events]
    assert events[0] == {"type": "hello", "protocolVersion": 1, "jobVersion": events[0]["jobVersion"]}
    assert events[0]["jobVersion"].startswith("trainer-job ")
    assert kinds[1] == "phase" and events[1]["phase"] == "PREPARING"
    assert of_type(events, "devices")[0]["devices"] == [{"index": 0, "kind": "cpu"}]
    assert kinds.index("data_fit") < kinds.index("data_split") < kinds.index("resolved") < kinds.index("step")
    assert kinds[-1] == "completed" and kinds[-2] == "phase" and events[-2]["phase"] == "EXPORTING"
    assert [e["phase"] for e in of_type(events, "phase")] == ["PREPARING", "TRAINING", "EXPORTING"]
    fit = of_type(events, "data_fit")[0]
    assert fit == {"type": "data_fit", "rows": 64, "truncated": 0, "exact": 0, "dropped": 0}
    # validationSplit 0.25 of 64 rows: 16 held out, 48 trained on.
    assert of_type(events, "data_split")[0] == {"type": "data_split", "trainRows": 48, "validationRows": 16,
                                                "heldOut": True}
    resolved = of_type(events, "resolved")[0]
    assert len(resolved["settingsSha"]) == 64
    assert resolved["config"]["hyperparams"]["lora"]["rank"] == 8
    assert of_type(trained["second"][1], "resolved")[0]["settingsSha"] == resolved["settingsSha"]
    step = of_type(events, "step")[0]
    for field in ("loss", "learningRate", "gradNorm", "tokenAccuracy", "tokensPerSecond", "batchTokens",
                  "stepSeconds", "inputSeconds", "forwardBackwardSeconds", "optimizerSeconds", "paddingShare"):
        assert field in step, field
    assert step["learningRate"] == 0.0  # first warmup step, as transformers' LambdaLR
    assert of_type(events, "step")[1]["learningRate"] == pytest.approx(0.01)
    assert "mfu" not in step  # no known peak on a CPU
    assert 0 <= step["paddingShare"] < 1
    done = events[-1]
    assert done["steps"] == 24 and done["exportSeconds"] >= 0 and "checkpointSeconds" not in done


def test_steps_count_the_useful_flops_of_their_batch(trained):
    """usefulFlops is the documented formula (docs/telemetry-usage.md, "Useful FLOPs") for the
    step's batch: the frozen base forward and input gradient, LoRA r 8 on the 7 projections
    forward and both gradients, causal attention over each row, the head at the labelled
    positions."""
    cfg = json.loads((pathlib.Path(trained["model"]) / "config.json").read_text())
    h, i, layers = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_hidden_layers"]
    q = cfg["num_attention_heads"] * cfg["head_dim"]
    kv = cfg["num_key_value_heads"] * cfg["head_dim"]
    shapes = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]  # (in, out) of q k v o gate up down
    base = layers * sum(a * b for a, b in shapes)
    adapters = layers * sum(8 * (a + b) for a, b in shapes)
    steps = of_type(trained["first"][1], "step")
    for step in steps:
        # Every row of this task has the same length: no padding, so 4 rows of batchTokens / 4.
        assert step["paddingShare"] == 0, step
        tokens, labelled = step["batchTokens"], step["trainedTokens"]
        assert tokens % 4 == 0
        s = tokens // 4
        attention = 3 * 4 * layers * q * 4 * s * (s + 1) // 2
        expected = 4 * base * tokens + 6 * adapters * tokens + attention + 4 * h * cfg["vocab_size"] * labelled
        assert step["usefulFlops"] == pytest.approx(expected, rel=1e-12), step
        assert "usefulMfu" not in step  # no known peak on a CPU
    # Beside the specification's convention, which counts 6 x every linear parameter and the head
    # at every token: the useful count is smaller.
    assert steps[0]["usefulFlops"] < 6 * (base + h * cfg["vocab_size"]) * steps[0]["batchTokens"]


def test_step_memory_is_the_engines_own_accounting(trained):
    steps = of_type(trained["first"][1], "step")
    model = trained["model"]
    from safetensors import safe_open
    weight_bytes = 0
    for f in pathlib.Path(model).glob("*.safetensors"):
        with safe_open(str(f), "pt") as st:
            for k in st.keys():
                if "embed_tokens" in k or "norm" in k or "proj" in k or "lm_head" in k:
                    t = st.get_tensor(k)
                    weight_bytes += t.numel() * 4  # trained in FP32
    adapter = load_adapter_bytes(trained["first"][0] / "adapter")
    for step in steps:
        mem = step["memory"]
        usage = mem["usage"]
        # Counted from the tensors: the base weights in FP32, the LoRA weights, their
        # gradients (FP32, as the weights), AdamW's two moments.
        assert usage["weights"] == weight_bytes
        assert usage["adapter"] == adapter
        assert usage["gradients"] == adapter
        assert usage["optimizerState"] == 2 * adapter
        assert usage["activations"] > 0
        # Only what a CPU has: no caching allocator, no driver figures.
        assert set(usage) == {"weights", "adapter", "gradients", "optimizerState", "activations", "otherTensors"}
        assert "reservedPeakBytes" not in mem
        # The parts of a step's peak never exceed the peak held since the start.
        assert sum(usage.values()) <= mem["allocatedPeakBytes"]
    peaks = [s["memory"]["allocatedPeakBytes"] for s in steps]
    assert peaks == sorted(peaks)  # a high-water mark never falls
    first = steps[0]["memory"]
    assert first["allocatedPeakBytes"] >= sum(first["usage"][k] for k in ("weights", "adapter", "optimizerState"))


def load_adapter_bytes(adapter):
    from safetensors.torch import load_file
    return sum(t.numel() * 4 for t in load_file(str(adapter / "adapter_model.safetensors")).values())


def test_saved_adapter_loads_in_peft_and_reproduces_our_logits(trained, job, tmp_path):
    import peft
    from safetensors.torch import load_file, save_file

    out = trained["first"][0]
    adapter = out / "adapter"
    cfg = json.loads((adapter / "adapter_config.json").read_text())
    assert cfg["peft_type"] == "LORA" and cfg["r"] == 8 and cfg["lora_alpha"] == 16
    assert cfg["task_type"] == "CAUSAL_LM" and cfg["bias"] == "none"
    tensors = load_file(str(adapter / "adapter_model.safetensors"))
    assert "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight" in tensors
    assert "base_model.model.model.layers.1.mlp.down_proj.lora_B.weight" in tensors
    pm = peft.PeftModel.from_pretrained(load_hf(trained["model"]), str(adapter))
    pm.eval()
    ids = torch.randint(0, pm.config.vocab_size, (2, 10), generator=torch.Generator().manual_seed(5))
    save_file({"input_ids": ids}, str(tmp_path / "in.safetensors"))
    job("debug-forward", "--model", trained["model"], "--adapter", adapter, "--inputs", tmp_path / "in.safetensors",
        "--output", tmp_path / "out.safetensors")
    ours = load_file(str(tmp_path / "out.safetensors"))["logits"]
    with torch.no_grad():
        ref = pm(input_ids=ids).logits
    assert (ours - ref).abs().max().item() < 1e-4
    # The adapter changed the model: it is not the zero-initialised one.
    assert any(v.abs().max() > 0 for k, v in tensors.items() if "lora_B" in k)


def test_score_matches_transformers_with_the_adapter(trained, job):
    import peft

    adapter = trained["first"][0] / "adapter"
    out = job("score", "--model", trained["model"], "--adapter", adapter, "--data", trained["data"])
    result = json.loads(out.stdout)
    assert result["tokens"] > 0 and result["rows"] == 64
    # The same quantity from transformers + PEFT over the rows as the data layer renders and
    # masks them (`trainer-job tokenize --chat`, checked against transformers in tests/python/text).
    pm = peft.PeftModel.from_pretrained(load_hf(trained["model"]), str(adapter)).eval()
    total, count = 0.0, 0
    for line in pathlib.Path(trained["data"]).read_text().splitlines():
        row = json.loads(job("tokenize", "--tokenizer", trained["model"], "--chat", input=line).stdout)
        ids = row["input_ids"]
        labels = [t if m else -100 for t, m in zip(ids, row["trained"])]
        with torch.no_grad():
            logits = pm(input_ids=torch.tensor([ids])).logits[0, :-1]
        tgt = torch.tensor(labels[1:])
        mask = tgt != -100
        total += torch.nn.functional.cross_entropy(logits[mask], tgt[mask], reduction="sum").item()
        count += int(mask.sum())
    assert result["tokens"] == count
    assert math.isclose(result["mean_loss"], total / count, rel_tol=1e-5)


def test_sigterm_stops_at_a_step_boundary(tiny_models, job, bin_dir, tmp_path):
    import signal
    import subprocess
    import time

    data = write_jsonl(tmp_path / "train.jsonl", task_rows(64))
    plan = plan_for(tiny_models("qwen3", sharp=True), data, maxSteps=100000, validationSplit=0.0, validationFrequencySteps=0)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    events_path = tmp_path / "events"
    proc = subprocess.Popen([str(bin_dir / "trainer-job"), "run", "--plan", str(tmp_path / "plan.json"), "--output",
                             str(tmp_path / "out"), "--events", str(events_path)], stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while time.time() < deadline:
        if events_path.exists() and '"type":"step"' in events_path.read_text():
            break
        time.sleep(0.1)
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert events[-1]["type"] == "cancelled" and events[-1]["steps"] >= 1
    assert not (tmp_path / "out" / "adapter").exists()
