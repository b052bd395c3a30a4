"""maxSeqLength fit counting, validation split, shuffling, padding and packing of a real
dataset under the npm tokenizers (through text_probe's "dataset" request)."""
from __future__ import annotations

import json

import pytest

from models import tokenizer_dir


def chat(user: str, assistant: str) -> dict:
    return {"messages": [{"role": "user", "content": user}, {"role": "assistant", "content": assistant}]}


ROWS = [
    chat("Hi", "Hello!"),
    chat("What is 2+2?", "4"),
    chat("Name three colours.", "Red, green and blue."),
    chat("word " * 60, "ok"),                       # long prompt: cut before the answer -> dropped
    chat("Tell me a story.", "Once upon a time " * 12),  # long answer: cut inside the answer -> kept
    {"prompt": "The capital of Italy is", "completion": " Rome."},
    chat("Count to five.", "1 2 3 4 5"),
    chat("Bye", "Goodbye!"),
]


@pytest.fixture()
def dataset(tmp_path):
    path = tmp_path / "train.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    return path


def hf_length(hf, row):
    if "messages" in row:
        return len(hf.apply_chat_template(row["messages"], tokenize=True, return_dict=True)["input_ids"])
    return len(hf(row["prompt"] + row["completion"] + hf.eos_token)["input_ids"])


def test_fit_counts_follow_the_spec(probe, dataset, tokenizer_name, hf_tokenizers):
    hf = hf_tokenizers[tokenizer_name]
    folder = str(tokenizer_dir(tokenizer_name))
    lengths = [hf_length(hf, r) for r in ROWS]
    full = probe.ok(op="dataset", dir=folder, path=str(dataset), max_seq_length=100000)
    assert full["lengths"] == lengths
    assert full["fit"] == {"rows": len(ROWS), "truncated": 0, "exact": 0, "dropped": 0}

    # Per-row first trained position, from the untruncated rows.
    first_trained = []
    for r in ROWS:
        trained = probe.ok(op="row", dir=folder, row=r)["trained"]
        first_trained.append(trained.index(1))
    limit = sorted(lengths)[len(lengths) // 2]  # some rows over, at least one exactly at it
    fit = probe.ok(op="dataset", dir=folder, path=str(dataset), max_seq_length=limit)["fit"]
    assert fit == {
        "rows": len(ROWS),
        "truncated": sum(n > limit for n in lengths),
        "exact": sum(n == limit for n in lengths),
        "dropped": sum(n > limit and f >= limit for n, f in zip(lengths, first_trained)),
    }
    assert fit["truncated"] >= 2 and fit["exact"] >= 1 and fit["dropped"] >= 1


def test_padded_batches(probe, dataset, tokenizer_name):
    folder = str(tokenizer_dir(tokenizer_name))
    info = probe.ok(op="info", dir=folder)
    out = probe.ok(op="dataset", dir=folder, path=str(dataset), max_seq_length=64, batch_size=3)
    rows = {}
    for line in out["train_lines"]:
        rows[line] = probe.ok(op="row", dir=folder, row=ROWS[line - 1])
    seen = []
    for b in out["batches"]:
        L = b["seq_len"]
        for r in range(b["rows"]):
            ids = b["input_ids"][r * L:(r + 1) * L]
            att = b["attention_mask"][r * L:(r + 1) * L]
            labels = b["labels"][r * L:(r + 1) * L]
            n = sum(att)
            assert att == [1] * n + [0] * (L - n)  # right padding
            assert ids[n:] == [info["pad_id"]] * (L - n)
            assert b["position_ids"][r * L:r * L + n] == list(range(n))
            seen.append(ids[:n])
            line = out["train_lines"][len(seen) - 1]
            expected = rows[line]
            m = min(len(expected["input_ids"]), 64)
            assert ids[:n] == expected["input_ids"][:m]
            assert labels[:n] == [i if t and k > 0 else -100
                                  for k, (i, t) in enumerate(zip(expected["input_ids"][:m], expected["trained"][:m]))]
            assert labels[n:] == [-100] * (L - n)
        assert b["padding_tokens"] == b["rows"] * L - sum(b["attention_mask"])
    assert len(seen) == len(out["train_lines"])


def test_packing_never_crosses_rows(probe, dataset, tokenizer_name):
    folder = str(tokenizer_dir(tokenizer_name))
    limit = 96
    padded = probe.ok(op="dataset", dir=folder, path=str(dataset), max_seq_length=limit, batch_size=1)
    packed = probe.ok(op="dataset", dir=folder, path=str(dataset), max_seq_length=limit, batch_size=2, packing=True)
    assert len(packed["batches"]) < len(padded["batches"])
    # Concatenating the packed rows gives back every row in order.
    flat_rows = [b["input_ids"][:b["real_tokens"]] for b in padded["batches"]]
    packed_rows = []
    for b in packed["batches"]:
        L = b["seq_len"]
        for r in range(b["rows"]):
            ids = b["input_ids"][r * L:(r + 1) * L]
            seq = b["sequence_ids"][r * L:(r + 1) * L]
            pos = b["position_ids"][r * L:(r + 1) * L]
            labels = b["labels"][r * L:(r + 1) * L]
            n = sum(1 for s in seq if s >= 0)
            assert n <= limit
            assert seq[n:] == [-1] * (L - n)
            start = 0
            for k in range(max(seq[:n]) + 1):
                length = seq[:n].count(k)
                assert seq[start:start + length] == [k] * length  # contiguous
                assert pos[start:start + length] == list(range(length))  # positions restart
                assert labels[start] == -100  # no target across the boundary
                packed_rows.append(ids[start:start + length])
                start += length
    assert packed_rows == flat_rows


def test_split_and_shuffle_are_deterministic(probe, dataset):
    folder = str(tokenizer_dir("qwen3"))
    a = probe.ok(op="dataset", dir=folder, path=str(dataset), validation_split=0.25, seed=3, shuffle=True)
    b = probe.ok(op="dataset", dir=folder, path=str(dataset), validation_split=0.25, seed=3, shuffle=True)
    c = probe.ok(op="dataset", dir=folder, path=str(dataset), validation_split=0.25, seed=3, shuffle=True, epoch=1)
    assert len(a["validation_lines"]) == 2 and len(a["train_lines"]) == len(ROWS) - 2
    assert a["validation_lines"] == b["validation_lines"] and a["order"] == b["order"]
    assert sorted(a["order"]) == list(range(len(ROWS) - 2))
    assert c["order"] != a["order"]
    assert not set(a["validation_lines"]) & set(a["train_lines"])


@pytest.mark.parametrize("content,message", [
    ("{not json\n", "train.jsonl:1: not valid JSON"),
    (json.dumps({"messages": [{"role": "user", "content": "x"}]}) + "\n",
     "train.jsonl:1: messages: the conversation must end with an assistant message (the last is \"user\")"),
    (json.dumps(chat("a", "b")) + "\n" + json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n",
     "train.jsonl:2: messages[0].role: unknown role \"robot\" (expected system, user, assistant or tool)"),
    (json.dumps({"prompt": "x"}) + "\n", "train.jsonl:1: completion: missing (prompt/completion rows need both)"),
])
def test_bad_rows_name_file_line_and_field(probe, tmp_path, content, message):
    path = tmp_path / "train.jsonl"
    path.write_text(content)
    answer = probe.ask(op="dataset", dir=str(tokenizer_dir("qwen3")), path=str(path))
    assert answer["error"].startswith(str(tmp_path) + "/" + message), answer["error"]
