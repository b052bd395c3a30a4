"""`trainer-job tokenize` and `trainer-job analyze` through the real binary."""
from __future__ import annotations

import json
import subprocess

from models import tokenizer_dir


def job(bin_dir, *args, stdin: str = "", check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run([str(bin_dir / "trainer-job"), *args], input=stdin, capture_output=True, text=True,
                          encoding="utf-8", timeout=300)
    if check:
        assert proc.returncode == 0, proc.stderr
    return proc


def test_tokenize_prints_the_ids_transformers_gives(bin_dir, tokenizer_name, hf_tokenizers):
    hf = hf_tokenizers[tokenizer_name]
    text = "Hello, 世界! 🙂\n    def f(x): return x  \n<|im_start|>"
    folder = str(tokenizer_dir(tokenizer_name))
    assert json.loads(job(bin_dir, "tokenize", "--tokenizer", folder, stdin=text).stdout) == hf.encode(text)
    no_special = job(bin_dir, "tokenize", "--tokenizer", folder, "--no-special", stdin=text).stdout
    assert json.loads(no_special) == hf.encode(text, add_special_tokens=False)
    ids = hf.encode(text)
    assert json.loads(job(bin_dir, "tokenize", "--tokenizer", folder, "--decode", stdin=json.dumps(ids)).stdout) == \
        hf.decode(ids)


def test_tokenize_chat_shows_what_is_trained(bin_dir, hf_tokenizers):
    hf = hf_tokenizers["qwen3"]
    row = {"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}]}
    out = json.loads(job(bin_dir, "tokenize", "--tokenizer", str(tokenizer_dir("qwen3")), "--chat",
                         stdin=json.dumps(row, indent=2)).stdout)
    assert out["text"] == hf.apply_chat_template(row["messages"], tokenize=False)
    assert hf.decode([i for i, t in zip(out["input_ids"], out["trained"]) if t]) == \
        "<think>\n\n</think>\n\nHello!<|im_end|>\n"


def test_tokenize_errors(bin_dir, tmp_path):
    proc = job(bin_dir, "tokenize", "--tokenizer", str(tmp_path), stdin="x", check=False)
    assert proc.returncode == 1
    assert f"{tmp_path}/tokenizer.json: not found" in proc.stderr
    proc = job(bin_dir, "tokenize", stdin="x", check=False)
    assert proc.returncode == 2 and "--tokenizer DIR is required" in proc.stderr
    proc = job(bin_dir, "tokenize", "--tokenizer", str(tokenizer_dir("qwen3")), "--chat",
               stdin='{"messages": [{"role": "user", "content": "x"}]}', check=False)
    assert proc.returncode == 1
    assert "stdin:1: messages: the conversation must end with an assistant message" in proc.stderr


def write_rows(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_analyze_reports_lengths_and_fit(bin_dir, tmp_path, tokenizer_name, hf_tokenizers):
    hf = hf_tokenizers[tokenizer_name]
    rows = [{"messages": [{"role": "user", "content": "q" * (i * 7 + 1)}, {"role": "assistant", "content": "a"}]}
            for i in range(30)]
    data = write_rows(tmp_path / "train.jsonl", rows)
    def tokens(messages, gen=False):
        return len(hf.apply_chat_template(messages, tokenize=True, return_dict=True,
                                          add_generation_prompt=gen)["input_ids"])

    pairs = [(tokens(r["messages"]), tokens(r["messages"][:1], gen=True)) for r in rows]  # (length, first trained)
    lengths = sorted(n for n, _ in pairs)
    limit = lengths[20]
    out = json.loads(job(bin_dir, "analyze", "--model", str(tokenizer_dir(tokenizer_name)), "--data", str(data),
                         "--max-seq-length", str(limit), "-o", "json").stdout)
    assert out["rows"] == 30
    assert out["minTokens"] == lengths[0] and out["maxTokens"] == lengths[-1]
    assert out["meanTokens"] == sum(lengths) / 30
    assert out["p50"] == lengths[14] and out["p90"] == lengths[26] and out["p99"] == lengths[29]
    assert out["rowsOverMaxSeqLength"] == sum(n > limit for n in lengths)
    assert out["rowsAtMaxSeqLength"] == sum(n == limit for n in lengths)
    assert out["rowsWithNothingToTrain"] == sum(n > limit and first >= limit for n, first in pairs)
    assert out["rowsWithNothingToTrain"] >= 1
    assert out["maxSeqLength"] == limit
    text = job(bin_dir, "analyze", "--model", str(tokenizer_dir(tokenizer_name)), "--data", str(data),
               "--max-seq-length", str(limit)).stdout
    assert f"maxSeqLength    {limit}: {out['rowsOverMaxSeqLength']} rows over it (cut)" in text


def test_analyze_bad_row_names_file_line_and_field(bin_dir, tmp_path):
    data = write_rows(tmp_path / "bad.jsonl", [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant"}]},
    ])
    proc = job(bin_dir, "analyze", "--model", str(tokenizer_dir("qwen3")), "--data", str(data), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"trainer-job analyze: {data}:2: messages[1].content: missing"
    proc = job(bin_dir, "analyze", "--model", str(tokenizer_dir("qwen3")), "--data", str(data),
               "--max-seq-length", "0", check=False)
    assert proc.returncode == 2 and "--max-seq-length: must be a positive integer, got '0'" in proc.stderr
