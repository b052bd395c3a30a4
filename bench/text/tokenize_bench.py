#!/usr/bin/env python3
"""Dataset preparation speed, side by side: our text/data layers vs transformers + TRL.

Both sides turn the same synthetic chat JSONL (multi-turn, tools, tool calls) into token ids and
assistant-only loss masks under the same tokenizer:
  - ours:   text_probe's "dataset" request (rust/text + src/engine/data, all rows, fit to
            maxSeqLength), timed end to end inside one process that already loaded the tokenizer;
  - theirs: transformers' apply_chat_template(tokenize=True, return_assistant_tokens_mask=True)
            with TRL's training template (what SFTTrainer(assistant_only_loss=True) runs per row).
Prints rows/s of each and the ratio. Run by hand:

  TRAINER_BUILD_DIR=build .venv/bin/python bench/text/tokenize_bench.py [--rows 2000] [--tokenizer qwen3]
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import shutil
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(REPO / "tests" / "python" / "text"), str(REPO / "tests" / "python")]

from models import tokenizer_dir  # noqa: E402


def make_rows(n: int, seed: int) -> list[dict]:
    from conversations import CONVERSATIONS

    rng = random.Random(seed)
    words = "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu".split()
    rows = []
    for _ in range(n):
        _, messages, tools = rng.choice(CONVERSATIONS)
        messages = [dict(m) for m in messages]
        for m in messages:
            if isinstance(m.get("content"), str) and m["role"] in ("user", "assistant"):
                m["content"] = m["content"] + " " + " ".join(rng.choice(words) for _ in range(rng.randint(5, 120)))
        rows.append({"messages": messages, **({"tools": tools} if tools else {})})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--tokenizer", default="qwen3", choices=["qwen3", "llama3"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import trl
    from transformers import AutoTokenizer

    from conftest import Probe

    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    rows = make_rows(args.rows, args.seed)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = pathlib.Path(tmp)
        data = tmp / "train.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in rows))
        template = (pathlib.Path(trl.__file__).parent / "chat_templates" /
                    f"{args.tokenizer}_training.jinja").read_text()
        folder = tmp / "tok"
        folder.mkdir()
        shutil.copyfile(tokenizer_dir(args.tokenizer) / "tokenizer.json", folder / "tokenizer.json")
        config = json.loads((tokenizer_dir(args.tokenizer) / "tokenizer_config.json").read_text())
        (folder / "tokenizer_config.json").write_text(json.dumps({**config, "chat_template": template}))

        probe = Probe(build / "tests" / "unit" / "engine" / "text" / "text_probe")
        probe.ok(op="info", dir=str(folder))  # load the tokenizer outside the timing
        for label, d in (("own template", str(tokenizer_dir(args.tokenizer))), ("generation markers", str(folder))):
            probe.ok(op="info", dir=d)
            out = probe.ok(op="dataset", dir=d, path=str(data), max_seq_length=100000, no_batches=True)
            ours = out["load_seconds"]
            print(f"ours ({label}): {len(out['lengths'])} rows in {ours:.2f} s = {len(rows) / ours:.0f} rows/s "
                  f"({sum(out['lengths'])} tokens)")
        probe.close()

        hf = AutoTokenizer.from_pretrained(str(folder))
        t = time.perf_counter()
        tokens = 0
        for r in rows:
            enc = hf.apply_chat_template(r["messages"], tools=r.get("tools"), tokenize=True, return_dict=True,
                                         return_assistant_tokens_mask=True)
            tokens += len(enc["input_ids"])
        theirs = time.perf_counter() - t
        print(f"transformers + TRL template: {len(rows)} rows in {theirs:.2f} s = {len(rows) / theirs:.0f} rows/s "
              f"({tokens} tokens)")
        print(f"ratio (ours with markers / transformers): {theirs / ours:.2f}x  (threads: {os.cpu_count()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
