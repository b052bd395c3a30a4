#!/usr/bin/env python3
"""The GPU check's measurements (bench/gpu/run builds or unpacks trainer-job, then runs this).

For each model shape (random weights, Qwen3 architecture, the real Qwen3 vocabulary, bf16):
  parity:  the engine's first-step loss against transformers' loss on the same rows (one batch:
           LoRA B is zero at the start, so the first loss is the base model's), bf16 on the
           device; transformers in fp32 on the same device is printed beside it as the reference;
  speed:   LoRA SFT (r 16 on q/k/v/o/gate/up/down, AdamW, batch 8 x ~512 tokens, no packing),
           three sides on the same device, alternating (E H C, E H C, ...), each pair's ratio and
           the median printed:
             E  trainer-job (a fresh process per turn; its step plus input seconds);
             H  a plain transformers + PEFT loop (fused AdamW), the head at every position;
             C  the same loop with the head compacted to the labelled positions (what a
                competent user does: hidden states, then the head only where there are labels);
           tokens/s over the steps after the warm-up, peak device memory of each side.
  MFU:     useful FLOPs per token as the engine counts them: its step events' usefulFlops
           (docs/telemetry-usage.md, "Useful FLOPs": the frozen base's forward and input
           gradient, the adapters' three products, causal attention, the head's forward and
           input gradient at labelled positions only), summed over a run of the whole data set
           and divided by its tokens; the transformers sides train the same rows, so the same
           FLOPs per token apply to them. Against the datasheet's dense bf16 peak (989 TFLOP/s
           for H100/H200) and against the bf16 GEMM rate measured at the start. The engine's own
           sft.mfu (6 x all linear parameters x tokens) and usefulMfu (over its step seconds
           alone) are printed beside it.
--device cpu is the smoke mode: tiny shapes, few steps, fp32, no MFU (no CPU peak table).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))

# Qwen3 shapes (config.json of the released models), random weights.
SHAPES = {
    "qwen3-0.6b": dict(hidden_size=1024, intermediate_size=3072, num_hidden_layers=28, num_attention_heads=16,
                       num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "qwen3-4b": dict(hidden_size=2560, intermediate_size=9728, num_hidden_layers=36, num_attention_heads=32,
                     num_key_value_heads=8, head_dim=128, tie_word_embeddings=True),
    "tiny": dict(hidden_size=128, intermediate_size=384, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, head_dim=32),
}
# Dense bf16 peak FLOP/s by device name (as src/engine/device/peak_flops.cpp lists them).
PEAKS = {"H200": 989e12, "H100": 989e12, "A100": 312e12, "L4": 121e12, "L40S": 362e12}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
RANK = 16


def log(msg: str) -> None:
    print(f"[gpu-check {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def body_linear_parameters(c: dict) -> int:
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    h = c["hidden_size"]
    return c["num_hidden_layers"] * (h * q + 2 * h * kv + q * h + 3 * h * c["intermediate_size"])


def adapter_parameters(c: dict, rank: int) -> int:
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    h, i = c["hidden_size"], c["intermediate_size"]
    dims = [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)]  # (in, out) per target
    return c["num_hidden_layers"] * sum(rank * (a + b) for a, b in dims)


def useful_flops_per_token(steps: list[dict]) -> float:
    """The engine's useful FLOPs per non-padding token over a run's step events."""
    if any("usefulFlops" not in e for e in steps):
        raise RuntimeError("trainer-job's step events carry no usefulFlops: a build older than the engine's "
                           "useful FLOPs (src/engine/train/useful_flops.h)")
    return sum(e["usefulFlops"] for e in steps) / max(1, sum(e["batchTokens"] for e in steps))


def make_rows(path: pathlib.Path, n: int, words_per_row: int, seed: int = 0) -> None:
    import random

    rnd = random.Random(seed)
    vocab = ("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
             "upsilon phi chi psi omega river mountain forest ocean desert valley city village road bridge").split()
    with open(path, "w") as f:
        for _ in range(n):
            prompt = "Summarize: " + " ".join(rnd.choice(vocab) for _ in range(words_per_row * 2 // 3))
            completion = " " + " ".join(rnd.choice(vocab) for _ in range(words_per_row // 3))
            f.write(json.dumps({"prompt": prompt, "completion": completion}) + "\n")


def engine_run(job: str, work: pathlib.Path, model: pathlib.Path, data: pathlib.Path, steps: int, batch: int,
               device: str, seq: int) -> list[dict]:
    plan = {"kind": "run", "workload": "gpu-check", "baseModel": str(model),
            "config": {"dataset": str(data), "method": "sft",
                       "hyperparams": {"lora": {"rank": RANK, "alpha": 32, "dropout": 0.0},
                                       "optimizer": {"learningRate": 1e-4, "schedule": "linear"},
                                       "training": {"maxSteps": steps, "batchSize": batch, "seed": 42}},
                       "maxSeqLength": seq, "model": {"precision": "BF16" if device == "cuda" else "FP32"}},
            "execution": {"gpus": 1 if device == "cuda" else 0}}
    work.mkdir(parents=True, exist_ok=True)
    (work / "plan.json").write_text(json.dumps(plan))
    events = work / "events.jsonl"
    events.unlink(missing_ok=True)
    out = subprocess.run([job, "run", "--plan", str(work / "plan.json"), "--output", str(work / "out"),
                          "--events", str(events)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise RuntimeError(f"trainer-job failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-6000:]}")
    return [json.loads(line) for line in events.read_text().splitlines() if line.strip()]


class HfSide:
    """A transformers + PEFT model resident on the device, trained by a plain loop: the engine's
    batches (rows in file order, right-padded), the loss over the completion tokens, fused AdamW on
    the LoRA weights. compact: the head only at the labelled positions."""

    def __init__(self, model_dir: pathlib.Path, device: str, dtype_name: str, seq: int):
        import torch
        import peft
        import transformers

        self.torch, self.device, self.seq = torch, device, seq
        self.tok = transformers.AutoTokenizer.from_pretrained(model_dir)
        dtype = getattr(torch, dtype_name)
        model = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=dtype, **({"device_map": device} if device == "cuda" else {})).to(device)
        self.model = peft.get_peft_model(model, peft.LoraConfig(r=RANK, lora_alpha=32, lora_dropout=0.0,
                                                                target_modules=TARGETS, task_type="CAUSAL_LM"))
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.opt = torch.optim.AdamW(params, lr=1e-4, fused=device == "cuda")

    def encode(self, data: pathlib.Path) -> list[tuple[list[int], list[int]]]:
        encoded = []
        for line in data.read_text().splitlines():
            r = json.loads(line)
            p = self.tok(r["prompt"])["input_ids"]
            ids = self.tok(r["prompt"] + r["completion"] + (self.tok.eos_token or ""))["input_ids"][:self.seq]
            labels = [-100] * min(len(p), len(ids)) + ids[len(p):]
            encoded.append((ids, labels))
        return encoded

    def tensors(self, chunk):
        torch = self.torch
        width = max(len(ids) for ids, _ in chunk)
        pad = self.tok.pad_token_id if self.tok.pad_token_id is not None else 0
        ids = torch.tensor([i + [pad] * (width - len(i)) for i, _ in chunk], device=self.device)
        labels = torch.tensor([lab + [-100] * (width - len(lab)) for _, lab in chunk], device=self.device)
        mask = torch.tensor([[1] * len(i) + [0] * (width - len(i)) for i, _ in chunk], device=self.device)
        return ids, labels, mask

    def loss(self, ids, labels, mask, compact: bool):
        if not compact:
            return self.model(input_ids=ids, attention_mask=mask, labels=labels).loss
        base = self.model.get_base_model()
        hidden = base.model(input_ids=ids, attention_mask=mask).last_hidden_state
        target = labels[:, 1:]
        keep = target != -100
        logits = base.lm_head(hidden[:, :-1][keep]).float()
        return self.torch.nn.functional.cross_entropy(logits, target[keep])

    def first_loss(self, data: pathlib.Path) -> float:
        with self.torch.no_grad():
            return self.loss(*self.tensors(self.encode(data)), compact=False).item()

    def train(self, encoded, steps: int, batch: int, compact: bool):
        """Returns [(time, tokens)] after each step and the peak device bytes of this turn."""
        torch = self.torch
        cuda = self.device == "cuda"
        if cuda:
            torch.cuda.synchronize()
            torch.cuda.reset_peak_memory_stats()
        marks = [(time.perf_counter(), 0)]
        for step in range(steps):
            chunk = [encoded[(step * batch + i) % len(encoded)] for i in range(batch)]
            ids, labels, mask = self.tensors(chunk)
            self.loss(ids, labels, mask, compact).backward()
            self.opt.step()
            self.opt.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            marks.append((time.perf_counter(), int(mask.sum().item())))
        peak = torch.cuda.max_memory_allocated() if cuda else 0
        if cuda:
            torch.cuda.empty_cache()  # the engine's process runs next on the same device
        return marks, peak

    def close(self):
        del self.model, self.opt
        if self.device == "cuda":
            self.torch.cuda.empty_cache()


def gemm_rate(device: str) -> float | None:
    """bf16 8192^3 products, mean of 10 after 3 warm-ups (FLOP/s)."""
    if device != "cuda":
        return None
    import torch

    a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    t = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 10 * 2 * 8192**3 / (time.perf_counter() - t)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    ap.add_argument("--job", required=True)
    ap.add_argument("--shapes", default=None, help="comma-separated (default: qwen3-0.6b,qwen3-4b; cpu: tiny)")
    ap.add_argument("--steps", type=int, default=None)
    ap.add_argument("--pairs", type=int, default=3, help="turns of each side, alternating")
    ap.add_argument("--skip", type=int, default=3, help="warm-up steps left out of tokens/s")
    ap.add_argument("--batch", type=int, default=None, help="rows per step (default 8; cpu 4)")
    ap.add_argument("--budget", type=float, default=480, help="seconds: no new turn starts after this")
    ap.add_argument("--out", default=None, help="folder for results.json")
    args = ap.parse_args()
    import models
    import torch

    t0 = time.time()
    cpu = args.device == "cpu"
    shapes = (args.shapes or ("tiny" if cpu else "qwen3-0.6b,qwen3-4b")).split(",")
    steps = args.steps or (6 if cpu else 20)
    batch, words, seq = (4, 60, 128) if cpu else (8, 380, 512)
    batch = args.batch or batch
    name, peak, measured = "cpu", None, None
    if not cpu:
        name = torch.cuda.get_device_name(0)
        peak = next((v for k, v in PEAKS.items() if k in name), None)
        measured = gemm_rate("cuda")
        log(f"{name}: bf16 GEMM 8192^3 measured {measured / 1e12:.0f} TFLOP/s (datasheet {peak and peak / 1e12})")
    work_root = pathlib.Path(tempfile.mkdtemp(prefix="gpu-check-"))

    # The engine on the device at all: a tiny model, two steps, its whole error when it fails.
    smoke = work_root / "smoke"
    smoke_model = models.make_tiny_model(smoke / "model", arch="qwen3", tokenizer="qwen3", seed=0,
                                         dtype="float32" if cpu else "bfloat16", **SHAPES["tiny"])
    make_rows(smoke / "rows.jsonl", 8, 40)
    try:
        ev = engine_run(args.job, smoke / "run", smoke_model, smoke / "rows.jsonl", 2, 4, args.device, 128)
        where = next((e["device"] for e in ev if e.get("device")), "?")
        log(f"smoke: engine ran 2 steps on {where}, "
            f"losses {[round(e['loss'], 4) for e in ev if e.get('type') == 'step']}")
    except Exception as e:  # noqa: BLE001 - the whole error is the point here
        log(f"smoke: the engine failed on {args.device}:\n{e}")
        return 2

    results, ok = [], True
    for shape in shapes:
        if time.time() - t0 > args.budget:
            log(f"{shape}: skipped, past the budget")
            continue
        try:
            r = measure_shape(args, shape, work_root / shape, models, cpu, steps, batch, words, seq, peak, measured,
                              t0)
        except Exception as e:  # noqa: BLE001 - report and go on to the next shape
            log(f"{shape}: failed: {e}")
            ok = False
            continue
        ok = ok and r["parity"]
        results.append(r)
        if args.out:
            pathlib.Path(args.out, "results.json").write_text(json.dumps(dict(device=name, gemm=measured,
                                                                              results=results), indent=1))
    print_table(results, name, cpu, batch, words, steps, args.skip, peak, measured)
    return 0 if ok and results else 1


def measure_shape(args, shape, work, models, cpu, steps, batch, words, seq, peak, measured, t0) -> dict:
    import torch

    cfg = SHAPES[shape]
    work.mkdir(parents=True)
    dtype = "float32" if cpu else "bfloat16"
    model_dir = models.make_tiny_model(work / "model", arch="qwen3", tokenizer="qwen3", seed=0, dtype=dtype,
                                       device=args.device, **cfg)
    vocab = json.loads((model_dir / "config.json").read_text())["vocab_size"]
    log(f"{shape}: model written; parity")
    pdata = work / "parity.jsonl"
    make_rows(pdata, batch, words, seed=1)
    ours_first = next(e for e in engine_run(args.job, work / "parity", model_dir, pdata, 1, batch, args.device, seq)
                      if e.get("type") == "step")["loss"]
    hf = HfSide(model_dir, args.device, dtype, seq)
    hf_first = hf.first_loss(pdata)
    fp32_first = None
    if not cpu:
        ref = HfSide(model_dir, args.device, "float32", seq)
        fp32_first = ref.first_loss(pdata)
        ref.close()
        del ref
    rel = abs(ours_first - hf_first) / max(1e-9, abs(hf_first))
    log(f"{shape}: first loss engine {ours_first:.5f}, transformers {hf_first:.5f} (fp32 {fp32_first}); speed")

    data = work / "train.jsonl"
    make_rows(data, batch * steps, words)
    encoded = hf.encode(data)
    lengths = [len(ids) for ids, _ in encoded]
    labelled = sum(sum(1 for x in lab[1:] if x != -100) for _, lab in encoded)
    fpt = None  # from the engine's first turn over the whole data set
    turns = {"engine": [], "hf": [], "hf_compact": []}
    peaks = {"engine": 0, "hf": 0, "hf_compact": 0}
    engine_mfu, engine_useful_mfu = [], []
    split = {"inputSeconds": [], "forwardBackwardSeconds": [], "optimizerSeconds": [], "stepSeconds": []}
    for turn in range(args.pairs):
        if turn > 0 and time.time() - t0 > args.budget:
            log(f"{shape}: {turn} turns of each side (past the budget)")
            break
        events = engine_run(args.job, work / f"run{turn}", model_dir, data, steps, batch, args.device, seq)
        every = [e for e in events if e.get("type") == "step"]
        if fpt is None:
            fpt = useful_flops_per_token(every)
        timed = every[args.skip:]
        secs = sum(e["stepSeconds"] + e.get("inputSeconds", 0) for e in timed)
        turns["engine"].append(sum(e["batchTokens"] for e in timed) / max(1e-9, secs))
        peaks["engine"] = max([peaks["engine"]] + [e.get("memory", {}).get("allocatedPeakBytes", 0) for e in timed])
        engine_mfu += [e["mfu"] for e in timed if e.get("mfu") is not None]
        engine_useful_mfu += [e["usefulMfu"] for e in timed if e.get("usefulMfu") is not None]
        for k in split:
            split[k] += [e.get(k, 0.0) for e in timed]
        for side, compact in (("hf", False), ("hf_compact", True)):
            marks, peak_bytes = hf.train(encoded, steps, batch, compact)
            span = marks[-1][0] - marks[args.skip][0]
            turns[side].append(sum(n for _, n in marks[args.skip + 1:]) / max(1e-9, span))
            peaks[side] = max(peaks[side], peak_bytes)
        log(f"{shape}: turn {turn + 1}: tokens/s engine {turns['engine'][-1]:.0f}, hf {turns['hf'][-1]:.0f}, "
            f"hf compact {turns['hf_compact'][-1]:.0f}")
    hf.close()
    del hf
    if not cpu:
        torch.cuda.empty_cache()
    med = {k: statistics.median(v) for k, v in turns.items()}
    ratios = [e / c for e, c in zip(turns["engine"], turns["hf_compact"])]
    mfu = (lambda tps, p: fpt * tps / p if p else None)  # noqa: E731
    return dict(shape=shape, body_params=body_linear_parameters(cfg), adapter_params=adapter_parameters(cfg, RANK),
                vocab=vocab, useful_flops_per_token=fpt, mean_tokens_per_row=sum(lengths) / len(lengths),
                labelled_share=labelled / sum(lengths), loss_engine=ours_first, loss_hf=hf_first,
                loss_hf_fp32=fp32_first, loss_rel_diff=rel, parity=rel < 2e-2, turns=turns, median=med,
                ratio_vs_compact=ratios, ratio_vs_compact_median=statistics.median(ratios),
                peak_bytes=peaks, mfu_datasheet={k: mfu(v, peak) for k, v in med.items()},
                mfu_measured_gemm={k: mfu(v, measured) for k, v in med.items()},
                engine_sft_mfu_6n=statistics.median(engine_mfu) if engine_mfu else None,
                engine_useful_mfu=statistics.median(engine_useful_mfu) if engine_useful_mfu else None,
                engine_step_split_median_s={k: statistics.median(v) for k, v in split.items() if v})


def print_table(results, name, cpu, batch, words, steps, skip, peak, measured) -> None:
    print(f"device: {name}; {'fp32' if cpu else 'bf16'}; batch {batch} rows of ~{words * 4 // 3} tokens; "
          f"{steps} steps, the first {skip} left out; LoRA r{RANK} on 7 modules; sides alternating")
    if measured:
        print(f"bf16 GEMM measured {measured / 1e12:.0f} TFLOP/s; datasheet {peak / 1e12:.0f}")
    pct = (lambda v: "n/a" if v is None else f"{v:.1%}")  # noqa: E731
    for r in results:
        print(f"\n{r['shape']}: first loss engine {r['loss_engine']:.5f}, transformers bf16 {r['loss_hf']:.5f} "
              f"(rel {r['loss_rel_diff']:.1e}, {'ok' if r['parity'] else 'OFF'}), transformers fp32 "
              f"{r['loss_hf_fp32'] if r['loss_hf_fp32'] is None else round(r['loss_hf_fp32'], 5)}")
        print(f"  useful FLOPs/token {r['useful_flops_per_token'] / 1e9:.2f} G; labelled share "
              f"{r['labelled_share']:.2f}; engine's own sft.mfu (6N) {pct(r['engine_sft_mfu_6n'])}, "
              f"usefulMfu (step seconds) {pct(r['engine_useful_mfu'])}")
        print(f"  {'side':12}{'turns tok/s':>28}{'median':>9}{'peak GiB':>10}{'MFU':>8}{'MFU/gemm':>10}")
        for side in ("engine", "hf", "hf_compact"):
            t = " ".join(f"{v:.0f}" for v in r["turns"][side])
            print(f"  {side:12}{t:>28}{r['median'][side]:9.0f}{r['peak_bytes'][side] / 2**30:10.2f}"
                  f"{pct(r['mfu_datasheet'][side]):>8}{pct(r['mfu_measured_gemm'][side]):>10}")
        print("  engine step, median seconds: " + ", ".join(f"{k} {v:.4f}" for k, v in
                                                          r["engine_step_split_median_s"].items()))
        print(f"  engine / hf_compact per turn: {' '.join(f'{x:.2f}' for x in r['ratio_vs_compact'])}; "
              f"median {r['ratio_vs_compact_median']:.2f}")
    print("JSON " + json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
