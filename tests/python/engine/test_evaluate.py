"""trainer-job evaluate (docs/evaluations.md): a model and adapter answer a dataset's prompts and
a grader scores each answer against the row's final assistant message.

The stored answers equal what transformers + PEFT generate greedily from the same adapter and
prompts (rendered with the tokenizer's chat template); the mean score equals the grader computed
directly over them; an http: evaluator's failures are unscored rows counted by cause and left
out of the mean; a bad spec is refused naming its field and writes nothing."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from engine_helpers import load_hf, write_jsonl
from overlap_rule import overlap_score, write_rule
from test_parity import make_peft

MAX_NEW = 12


def rows(n: int):
    topics = ["billing", "login", "refund", "shipping", "account", "delivery", "invoice", "password"]
    out = []
    for i in range(n):
        topic = topics[i % len(topics)]
        msgs = [{"role": "user", "content": f"Ticket {i}: my {topic} is broken, item {i * 7}."}]
        if i % 3 == 0:
            msgs.insert(0, {"role": "system", "content": "Label the ticket as JSON."})
        msgs.append({"role": "assistant", "content": json.dumps({"label": topic, "urgent": i % 2 == 0})})
        out.append({"messages": msgs})
    return out


def evaluate(job, tmp_path, spec: dict, name="eval", check=True):
    spec_path = tmp_path / f"{name}.spec.json"
    spec_path.write_text(json.dumps(spec))
    out_dir = tmp_path / name
    proc = job("evaluate", "--spec", spec_path, "--output", out_dir, check=check, timeout=600)
    return proc, out_dir


def hf_answers(model, tokenizer, dataset_rows, stop_ids):
    import torch

    answers = []
    for row in dataset_rows:
        ids = tokenizer.apply_chat_template(row["messages"][:-1], add_generation_prompt=True, tokenize=True,
                                            return_dict=False)
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=MAX_NEW, do_sample=False, eos_token_id=stop_ids,
                                 pad_token_id=tokenizer.pad_token_id)
        answers.append(tokenizer.decode(out[0, len(ids):], skip_special_tokens=True))
    return answers


@pytest.mark.parametrize("arch", ["qwen3", "llama"])
def test_answers_equal_peft_greedy_generation_and_the_mean_is_the_rule_over_them(arch, tiny_models, job, tmp_path):
    import transformers

    folder = tiny_models(arch, sharp=True)
    peft_model = make_peft(load_hf(folder))
    adapter = tmp_path / "adapter"
    peft_model.save_pretrained(adapter)
    peft_model.eval()
    data = rows(10)
    dataset = write_jsonl(tmp_path / "eval.jsonl", data)
    rule = write_rule(tmp_path)

    proc, out_dir = evaluate(job, tmp_path, {"baseModel": str(folder), "adapter": str(adapter), "dataset": str(dataset),
                                            "grader": {"kind": f"rule:{rule}"}, "maxNewTokens": MAX_NEW,
                                            "batchSize": 4})
    stored = [json.loads(line) for line in (out_dir / "rows.jsonl").read_text().splitlines()]
    report = json.loads((out_dir / "report.json").read_text())
    events = [json.loads(line) for line in proc.stdout.splitlines()]  # the job protocol's, on stdout
    assert events[0]["type"] == "hello" and events[-1]["type"] == "evaluation_report"
    assert events[-1]["report"]["meanScore"] == report["meanScore"]
    assert [(x["type"], x["done"], x["total"]) for x in events[1:-1]] == [
        ("evaluation_progress", 4, 10), ("evaluation_progress", 8, 10), ("evaluation_progress", 10, 10)]

    tokenizer = transformers.AutoTokenizer.from_pretrained(folder)
    stop_ids = sorted({tokenizer.eos_token_id, peft_model.generation_config.eos_token_id} - {None})
    want = hf_answers(peft_model, tokenizer, data, stop_ids)
    assert [r["output"] for r in stored] == want
    assert [r["line"] for r in stored] == list(range(1, 11))
    assert [r["expected"] for r in stored] == [d["messages"][-1]["content"] for d in data]
    assert stored[0]["prompt"] == data[0]["messages"][:-1] and stored[1]["input"] == data[1]["messages"][0]["content"]

    scores = [overlap_score(a, d["messages"][-1]["content"]) for a, d in zip(want, data)]
    assert [r["score"] for r in stored] == pytest.approx(scores, abs=1e-12)
    assert report["meanScore"] == pytest.approx(sum(scores) / len(scores), abs=1e-12)
    assert 0 < report["meanScore"] < 1, "the rule must give a non-trivial mean for this test to mean anything"
    assert report["rows"] == report["scoredRows"] == 10 and report["unscoredRows"] == 0
    # A random model reproduces no label: every field is wrong, and listed.
    assert {f["field"] for f in report["perFieldAccuracy"]} == {"label", "urgent"}
    assert report["exactMatchRate"] == 0.0

    # The base model answers differently: the adapter was applied.
    _, base_dir = evaluate(job, tmp_path, {"baseModel": str(folder), "dataset": str(dataset),
                                          "grader": {"kind": f"rule:{rule}"}, "maxNewTokens": MAX_NEW}, name="base")
    base = [json.loads(line) for line in (base_dir / "rows.jsonl").read_text().splitlines()]
    assert [r["output"] for r in base] != want


class Evaluator:
    """An http: evaluator on loopback that answers by the row's input: "score" -> {"score": 0.5},
    "ok" -> {"ok": true}, "garbage" -> a body that is not JSON, "slow" -> nothing before the
    term's timeout."""

    def __init__(self):
        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                text = body["input"]
                if "slow" in text:
                    time.sleep(3)
                reply = b"<html>oops</html>" if "garbage" in text else json.dumps(
                    {"ok": True} if " ok " in text else {"score": 0.5}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                try:
                    self.wfile.write(reply)
                except BrokenPipeError:  # the slow row's caller gave up: what the test wants
                    pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/grade"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


def test_http_evaluator_failures_are_unscored_by_cause_and_left_out_of_the_mean(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3")
    kinds = ["score", "ok", "garbage", "slow", "score", "ok", "garbage", "score"]
    data = [{"messages": [{"role": "user", "content": f"row {i} {k} please"},
                          {"role": "assistant", "content": "{\"label\": \"x\"}"}]} for i, k in enumerate(kinds)]
    dataset = write_jsonl(tmp_path / "http.jsonl", data)
    server = Evaluator()
    try:
        _, out_dir = evaluate(job, tmp_path, {"baseModel": str(folder), "dataset": str(dataset), "maxNewTokens": 4,
                                             "grader": {"kind": f"http:{server.url}", "timeoutSeconds": 1,
                                                        "retries": 0}})
    finally:
        server.close()
    stored = [json.loads(line) for line in (out_dir / "rows.jsonl").read_text().splitlines()]
    report = json.loads((out_dir / "report.json").read_text())
    by_kind = {k: [r for r, kk in zip(stored, kinds) if kk == k] for k in set(kinds)}
    assert all(r["score"] == 0.5 for r in by_kind["score"])
    assert all(r["score"] == 1.0 for r in by_kind["ok"])
    assert all(r["score"] is None and r["unscoredCause"] == "unreachable" for r in by_kind["garbage"])
    assert all(r["score"] is None and r["unscoredCause"] == "timeout" for r in by_kind["slow"])
    assert report["unscored"] == {"unreachable": 2, "timeout": 1}
    assert report["scoredRows"] == 5 and report["unscoredRows"] == 3
    assert report["meanScore"] == pytest.approx((3 * 0.5 + 2 * 1.0) / 5)


def test_a_prompt_too_long_and_a_gold_without_json_are_unscored_rows_not_low_scores(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3")
    data = [{"messages": [{"role": "user", "content": "short"}, {"role": "assistant", "content": '{"a": 1}'}]},
            {"messages": [{"role": "user", "content": "long " * 200}, {"role": "assistant", "content": '{"a": 2}'}]},
            {"messages": [{"role": "user", "content": "gold without JSON"}, {"role": "assistant", "content": "c"}]}]
    dataset = write_jsonl(tmp_path / "long.jsonl", data)
    _, out_dir = evaluate(job, tmp_path, {"baseModel": str(folder), "dataset": str(dataset), "maxNewTokens": 4,
                                         "maxSeqLength": 64})
    report = json.loads((out_dir / "report.json").read_text())
    stored = [json.loads(line) for line in (out_dir / "rows.jsonl").read_text().splitlines()]
    assert stored[1]["unscoredCause"] == "prompt_too_long" and "60" in stored[1]["detail"]
    assert report["unscored"] == {"prompt_too_long": 1, "gold_not_label": 1} and report["scoredRows"] == 1
    assert stored[0]["score"] == 0.0 and stored[2]["score"] is None


@pytest.mark.parametrize("spec,field", [
    ({"dataset": "x.jsonl"}, "baseModel"),
    ({"baseModel": "m", "dataset": "x.jsonl", "grader": {"kind": "regex-match"}}, "grader.kind"),
    ({"baseModel": "m", "dataset": "x.jsonl", "maxNewTokens": 0}, "maxNewTokens"),
    ({"baseModel": "m", "dataset": "x.jsonl", "temprature": 0.5}, "temprature"),
    ({"baseModel": "m", "dataset": "x.jsonl", "precision": "FP8"}, "precision"),
])
def test_a_bad_spec_is_refused_naming_the_field_and_writes_nothing(spec, field, job, tmp_path):
    proc, out_dir = evaluate(job, tmp_path, spec, check=False)
    assert proc.returncode == 2, proc.stderr
    assert field in proc.stderr
    assert not out_dir.exists()


def test_a_dataset_row_without_an_expected_answer_is_refused_by_line(tiny_models, job, tmp_path):
    folder = tiny_models("qwen3")
    dataset = write_jsonl(tmp_path / "bad.jsonl", [
        {"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]},
        {"messages": [{"role": "user", "content": "no answer"}]}])
    proc, out_dir = evaluate(job, tmp_path, {"baseModel": str(folder), "dataset": str(dataset)}, check=False)
    assert proc.returncode == 1
    assert "dataset" in proc.stderr and "bad.jsonl:2" in proc.stderr
    assert not out_dir.exists()
