"""`trainer evaluations` (issue 12, docs/evaluations.md) through the real CLI against a real
trainerd: a completed run's adapter and a base model answer held-out rows, graded.

The stored answers equal what transformers + PEFT generate greedily from the run's own adapter
folder; the mean score equals the grader computed directly over the stored answers; bad requests
are refused naming the field and create nothing; a cancelled evaluation ends CANCELLED; trainerd
killed while an evaluation runs finishes it after a restart, once."""
from __future__ import annotations

import json
import os
import signal

import pytest

from cli_support import EXAMPLES, MODEL_NAME, WORKLOAD, Cli, plan_text, start_trainerd, stop, wait_for
from overlap_rule import overlap_score, write_rule
from registry_support import make_peft_adapter, wait_model

MAX_NEW = 10



def held_out_rows(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()]
    return rows[-n:]


@pytest.fixture(scope="module")
def trainerd(bin_dir, sharp_model, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(sharp_model)}]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def setup(ready, tmp_path_factory):
    folder = tmp_path_factory.mktemp("evaluations")
    data = folder / "held-out.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in held_out_rows(6)))
    ready("datasets", "create", "-f", data, "--name", "held-out", check=True)
    rule = write_rule(folder)
    run_id = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan_text(3), check=True).stdout.strip()
    ready("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True)
    return {"run": run_id, "rule": rule, "data": data}


def peft_answers(base_path: str, adapter_path: str, rows: list[dict]) -> list[str]:
    """What transformers + PEFT generate greedily for each row's prompt (its chat template, the
    generation prompt, the model's end tokens)."""
    import torch
    import transformers
    from peft import PeftModel

    base = transformers.AutoModelForCausalLM.from_pretrained(base_path, dtype=torch.float32)
    model = PeftModel.from_pretrained(base, adapter_path).eval()
    tok = transformers.AutoTokenizer.from_pretrained(base_path)
    answers = []
    for row in rows:
        ids = tok.apply_chat_template(row["messages"][:-1], add_generation_prompt=True, tokenize=True, return_dict=False)
        with torch.no_grad():
            out = model.generate(input_ids=torch.tensor([ids]), attention_mask=torch.ones(1, len(ids), dtype=torch.long),
                                 max_new_tokens=MAX_NEW, do_sample=False,
                                 eos_token_id=sorted({tok.eos_token_id, model.generation_config.eos_token_id} - {None}),
                                 pad_token_id=tok.pad_token_id)
        answers.append(tok.decode(out[0, len(ids):], skip_special_tokens=True))
    return answers


def evaluations_count(cli) -> int:
    return len(cli.json("evaluations", "list", "--limit", "1000")["evaluations"])


def test_a_runs_adapter_answers_as_peft_does_and_the_mean_is_the_grader_over_the_answers(ready, setup, trainerd):
    done = ready.json("evaluations", "start", "--model", setup["run"], "--dataset", "held-out",
                      "--grader", f"rule:{setup['rule']}", "--max-new-tokens", MAX_NEW, "--wait", "--exit-status", "-q")
    assert done["phase"] == "COMPLETED", done
    assert done["workload"]["name"] == WORKLOAD  # a run's adapter carries its workload
    assert done["model"]["runId"] == setup["run"] and done["progress"] == {"rowsDone": 6, "rowsTotal": 6}
    rows = ready.json("evaluations", "rows", done["evaluationId"])["rows"]
    assert len(rows) == 6

    run = ready.json("runs", "get", setup["run"])
    gold_rows = held_out_rows(6)
    # The evaluation names the base model by content; its copy is in trainerd's model cache.
    assert "baseModelPath" not in done["model"]
    base = trainerd.data_dir / "models" / done["model"]["baseModelHash"]
    want = peft_answers(str(base), run["adapterPath"], gold_rows)
    assert [r["output"] for r in rows] == want, want
    assert len(set(want)) > 1, "the answers must differ for the comparison to mean anything"
    scores = [overlap_score(a, r["messages"][-1]["content"]) for a, r in zip(want, gold_rows)]
    report = ready.json("evaluations", "report", done["evaluationId"])
    assert report["meanScore"] == pytest.approx(sum(scores) / len(scores), abs=1e-12)
    assert 0 < report["meanScore"] < 1, want
    assert [r["score"] for r in rows] == pytest.approx(scores, abs=1e-12)
    # Scripting: the documented --jq example.
    mean = ready("evaluations", "get", done["evaluationId"], "--jq", ".report.meanScore", check=True).stdout.strip()
    assert float(mean) == pytest.approx(report["meanScore"])


def test_an_imported_peft_adapter_evaluates_as_peft_generates_and_is_listed_on_the_model(ready, setup, sharp_model,
                                                                                           tmp_path, trainerd):
    adapter = make_peft_adapter(sharp_model, tmp_path / "peft-adapter", rank=4, targets=("q_proj", "v_proj", "o_proj"),
                                seed=5)
    descriptor = tmp_path / "adapter.yaml"
    descriptor.write_text(f"servingModel:\n  variant: ADAPTER\n  baseModel: {MODEL_NAME}\n  ref: {adapter}\n"
                          f"workload: {WORKLOAD}\n")
    model = ready.json("trained-models", "register", "-f", descriptor)
    assert model["status"] == "REGISTERED"
    done = ready.json("evaluations", "start", "--model", model["modelId"], "--dataset", "held-out",
                      "--grader", f"rule:{setup['rule']}", "--max-new-tokens", MAX_NEW, "--wait", "--exit-status", "-q")
    assert done["phase"] == "COMPLETED" and done["model"]["kind"] == "registeredAdapter"
    assert done["workload"]["name"] == WORKLOAD  # the import's workload
    rows = ready.json("evaluations", "rows", done["evaluationId"])["rows"]
    want = peft_answers(str(trainerd.data_dir / "models" / done["model"]["baseModelHash"]), str(adapter),
                        held_out_rows(6))
    assert [r["output"] for r in rows] == want
    scores = [overlap_score(a, r["messages"][-1]["content"]) for a, r in zip(want, held_out_rows(6))]
    assert done["report"]["meanScore"] == pytest.approx(sum(scores) / len(scores), abs=1e-12)
    listed = ready.json("trained-models", "get", model["modelId"])["evaluations"]
    assert [(e["evaluationId"], e["meanScore"]) for e in listed] == [(done["evaluationId"], done["report"]["meanScore"])]


def test_a_completed_runs_registered_model_evaluates_like_its_adapter(ready, setup):
    model_id = ready.json("runs", "get", setup["run"])["modelId"]
    assert wait_model(ready, model_id)["status"] == "REGISTERED"
    by_model = ready.json("evaluations", "start", "--model", model_id, "--dataset", "held-out", "--max-new-tokens",
                          MAX_NEW, "--wait", "-q")
    by_run = ready.json("evaluations", "start", "--model", setup["run"], "--dataset", "held-out", "--max-new-tokens",
                        MAX_NEW, "--wait", "-q")
    assert by_model["phase"] == by_run["phase"] == "COMPLETED" and by_model["model"]["modelId"] == model_id
    rows_model = ready.json("evaluations", "rows", by_model["evaluationId"])["rows"]
    rows_run = ready.json("evaluations", "rows", by_run["evaluationId"])["rows"]
    assert [r["output"] for r in rows_model] == [r["output"] for r in rows_run]

    # One adapter, two identities: each evaluation carries both and is found by either.
    assert by_run["model"]["modelId"] == model_id and by_model["model"]["runId"] == setup["run"]
    both = {by_model["evaluationId"], by_run["evaluationId"]}
    for ref in (model_id, setup["run"]):
        listed = {e["evaluationId"] for e in ready.json("evaluations", "list", "--model", ref)["evaluations"]}
        assert both <= listed, (ref, listed)
    on_model = {e["evaluationId"] for e in ready.json("trained-models", "get", model_id)["evaluations"]}
    assert both <= on_model, on_model
    text = ready("evaluations", "get", by_run["evaluationId"], check=True).stdout
    assert f"run {setup['run'][:12]} adapter (model {model_id[:12]})" in text, text
    text = ready("evaluations", "get", by_model["evaluationId"], check=True).stdout
    assert f"model {model_id[:12]} (run {setup['run'][:12]}'s adapter)" in text, text


def test_json_label_match_reports_per_field_accuracy_and_a_base_model_needs_a_workload(ready, setup):
    refused = ready("evaluations", "start", "--model", MODEL_NAME, "--dataset", "held-out")
    assert refused.returncode == 1 and "workload" in refused.stderr
    done = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD, "--dataset", "held-out",
                      "--max-new-tokens", 6, "--wait", "-q")
    assert done["phase"] == "COMPLETED" and done["model"]["kind"] == "base"
    assert done["grader"]["kind"] == "json-label-match"  # the workload's grader
    report = done["report"]
    assert [f["field"] for f in report["perFieldAccuracy"]] == ["label"]
    rows = ready.json("evaluations", "rows", done["evaluationId"])["rows"]
    assert report["perFieldAccuracy"][0]["correct"] == sum(r["fields"]["label"] for r in rows)
    text = ready("evaluations", "report", done["evaluationId"], check=True).stdout
    assert "Mean score" in text and "label" in text
    listed = ready.json("evaluations", "list", "--model", MODEL_NAME)["evaluations"]
    assert [e["evaluationId"] for e in listed] == [done["evaluationId"]]


@pytest.mark.parametrize("args,field,words", [
    (["--model", "no-such-model", "--dataset", "held-out"], "model", "neither a completed run"),
    (["--dataset", "held-out"], "model", "required"),
    (["--model", "RUN", "--dataset", "no-such-dataset"], "dataset", "no-such-dataset"),
    (["--model", "RUN", "--dataset", "held-out", "--grader", "regex:x"], "grader", "regex:x"),
    (["--model", "RUN", "--dataset", "held-out", "--grader", "rule:relative.py"], "grader", "absolute"),
    (["--model", "RUN", "--dataset", "held-out", "--grader-instructions", "INSTR"], "graderInstructions", "model terms"),
    (["--model", "RUN", "--dataset", "held-out", "--workload", "other-workload"], "workload", "other-workload"),
    (["--model", "RUN", "--dataset", "held-out", "--max-new-tokens", "100000"], "maxNewTokens", "4096"),
])
def test_bad_requests_are_refused_naming_the_field_and_create_nothing(ready, setup, tmp_path, args, field, words):
    ready("workloads", "create", "other-workload")
    instructions = tmp_path / "instructions.txt"
    instructions.write_text("Be strict.")
    args = [setup["run"] if a == "RUN" else str(instructions) if a == "INSTR" else a for a in args]
    before = evaluations_count(ready)
    out = ready("evaluations", "start", *args)
    assert out.returncode == 1, out.stdout
    assert field in out.stderr and words in out.stderr, out.stderr
    assert evaluations_count(ready) == before


def test_a_cancelled_evaluation_ends_cancelled_and_reports_nothing(ready, setup):
    started = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD,
                         "--dataset", "sentiment-train", "--max-new-tokens", 64)
    ready("evaluations", "cancel", started["evaluationId"], "--force", check=True)
    ended = ready("evaluations", "wait", started["evaluationId"], "--exit-status", "-q")
    assert ended.returncode == 4, ended.stderr
    again = ready("evaluations", "cancel", started["evaluationId"], "--force")
    assert again.returncode == 1 and "already ended (CANCELLED)" in again.stderr
    report = ready("evaluations", "report", started["evaluationId"])
    assert report.returncode == 1 and "CANCELLED" in report.stderr


def test_trainerd_killed_during_an_evaluation_finishes_it_after_a_restart_once(bin_dir, tiny_model, tmp_path):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    service = start_trainerd(bin_dir, tmp_path / "svc", config)
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in held_out_rows(40)))
        cli("datasets", "create", "-f", data, "--name", "rows", check=True)
        cli("workloads", "create", WORKLOAD, check=True)
        started = cli.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD, "--dataset", "rows",
                           "--max-new-tokens", 24)
        eid = started["evaluationId"]
        wait_for(lambda: cli.json("evaluations", "get", eid)["progress"]["rowsDone"] > 0, 300, "a first batch")
        os.kill(service.proc.pid, signal.SIGKILL)
        service.proc.wait(timeout=10)
        service = start_trainerd(bin_dir, tmp_path / "svc", config)
        cli = Cli(bin_dir / "trainer", service.url)
        done = cli.json("evaluations", "wait", eid, "-q", "--timeout", "10m")
        assert done["phase"] == "COMPLETED" and done["report"]["rows"] == 40
        assert [e["evaluationId"] for e in cli.json("evaluations", "list")["evaluations"]] == [eid]
        assert len(cli.json("evaluations", "rows", eid, "--limit", 500)["rows"]) == 40
    finally:
        stop(service.proc, service.data_dir)
