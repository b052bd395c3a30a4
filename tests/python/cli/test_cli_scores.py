"""Workload score tables and evaluation settings (issue 12): `trainer workloads scores` and
`trainer workloads set-evaluation`, through the real CLI against a real trainerd.

A baseline and three runs in two training configurations are evaluated under the workload's
setting; the table puts the baseline beside one column per configuration, named by the newest
run's configName, each cell the newest evaluation's report. A new setting starts an empty default
table, and the old one stays reachable with --dataset and --grader."""
from __future__ import annotations

import json

import pytest

from cli_support import EXAMPLES, MODEL_NAME, WORKLOAD, free_port, plan_text, start_trainerd, stop
from overlap_rule import write_rule

MAX_NEW = 8


def rows_of(first: int, n: int) -> str:
    rows = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()
    start = first % len(rows)
    return "".join(line + "\n" for line in rows[start:start + n])


@pytest.fixture(scope="module")
def trainerd(bin_dir, sharp_model, tmp_path_factory):
    # A judge declared at a port nothing listens on: its scores never come, so its rows are unscored.
    judge = {"name": "judge-x", "url": f"http://127.0.0.1:{free_port()}", "readyTimeoutSeconds": 3}
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(sharp_model)}], "judges": [judge]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def scored(ready, tmp_path_factory):
    """The baseline and runs A, B (one configuration: A renamed later by C) and D evaluated under the
    workload's first setting: dataset held-out-1, grader rule:overlap.py."""
    folder = tmp_path_factory.mktemp("scores")
    for name, first in (("held-out-1", -6), ("held-out-2", -12)):
        path = folder / f"{name}.jsonl"
        path.write_text(rows_of(first, 6))
        ready("datasets", "create", "-f", path, "--name", name, check=True)
    rule = write_rule(folder)
    grader = f"rule:{rule}"
    ready("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out-1", "--grader", grader, check=True)

    def train(steps: int, config_name: str) -> str:
        run = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", check=True,
                    input=plan_text(steps, configName=config_name)).stdout.strip()
        ready("runs", "wait", run, "--timeout", "10m", "--exit-status", "-q", check=True)
        return run

    runs = {"A": train(3, "three-steps"), "D": train(4, "four-steps"), "C": train(3, "three-steps-v2")}

    def evaluate(*args) -> dict:
        done = ready.json("evaluations", "start", *args, "--max-new-tokens", MAX_NEW, "--wait", "--exit-status", "-q")
        assert done["phase"] == "COMPLETED", done
        return done

    evaluations = {"base": evaluate("--model", MODEL_NAME, "--workload", WORKLOAD)}
    for key in ("A", "D", "C"):
        evaluations[key] = evaluate("--model", runs[key])
    return {"runs": runs, "evaluations": evaluations, "grader": grader, "rule": rule}


def mean(e: dict) -> float:
    return e["report"]["meanScore"]


def test_the_table_puts_the_baseline_beside_one_column_per_configuration(ready, scored):
    ev = scored["evaluations"]
    doc = ready.json("workloads", "scores", WORKLOAD)
    assert doc["setting"]["current"] is True and doc["setting"]["grader"] == scored["grader"]
    assert len(doc["tables"]) == 1, doc
    table = doc["tables"][0]
    assert table["baseModel"] == MODEL_NAME and table["revision"]
    # Every evaluation read the workload's dataset and grader by default.
    assert {e["dataset"]["ref"] for e in ev.values()} == {ready.json("datasets", "get", "held-out-1")["hash"]}
    assert table["baseline"]["evaluationId"] == ev["base"]["evaluationId"]
    assert table["baseline"]["meanScore"] == pytest.approx(mean(ev["base"]))
    columns = {c["config"]: c for c in table["columns"]}
    # Runs A and C share their settings: one column, named by the newest run (C), its newest
    # evaluation speaking for it, two counted.
    assert set(columns) == {"three-steps-v2", "four-steps"}, columns
    same = columns["three-steps-v2"]
    assert same["evaluations"] == 2 and same["evaluationId"] == ev["C"]["evaluationId"]
    assert same["runId"] == scored["runs"]["C"] and same["meanScore"] == pytest.approx(mean(ev["C"]))
    four = columns["four-steps"]
    assert four["evaluations"] == 1 and four["meanScore"] == pytest.approx(mean(ev["D"]))
    for c in table["columns"]:
        assert c["delta"] == pytest.approx(c["meanScore"] - mean(ev["base"]))
        assert c["exactMatchRate"] is not None
    # Best first.
    assert [c["meanScore"] for c in table["columns"]] == sorted((c["meanScore"] for c in table["columns"]), reverse=True)
    assert mean(ev["D"]) != pytest.approx(mean(ev["C"])), "the two configurations must score apart"

    text = ready("workloads", "scores", WORKLOAD, check=True).stdout
    assert "baseline" in text and "three-steps-v2" in text and "four-steps" in text and "(the current setting)" in text
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert f"{mean(ev['base']):.4f}" in lines["baseline"]
    assert f"{mean(ev['D']):.4f}" in lines["four-steps"] and f"{mean(ev['D']) - mean(ev['base']):+.4f}" in lines["four-steps"]


def test_the_documented_jq_reads_the_best_score(ready, scored):
    best = ready("workloads", "scores", WORKLOAD, "--jq", ".tables[0].columns[0].meanScore", check=True).stdout
    table = ready.json("workloads", "scores", WORKLOAD)["tables"][0]
    assert float(best) == pytest.approx(max(c["meanScore"] for c in table["columns"]))


def test_a_new_setting_starts_a_new_table_and_the_old_one_stays_reachable(ready, scored):
    old_hash = ready.json("datasets", "get", "held-out-1")["hash"]
    before = ready.json("workloads", "get", WORKLOAD)
    out = ready("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out-2", "--grader", scored["grader"],
                check=True).stdout
    assert "older scores stay reachable" in out
    workload = ready.json("workloads", "get", WORKLOAD)
    assert workload["evaluation"]["dataset"] == ready.json("datasets", "get", "held-out-2")["hash"]
    old = workload["evaluationHistory"][-1]
    assert old["dataset"] == old_hash and old["grader"] == scored["grader"] and old["until"] == workload["evaluation"]["since"]
    assert len(workload["history"]) == len(before["history"]) + 1

    fresh = ready.json("workloads", "scores", WORKLOAD)
    assert fresh["setting"]["current"] is True and fresh["tables"] == []
    assert fresh["otherSettings"] == [{"dataset": old_hash, "grader": scored["grader"], "hasInstructions": False,
                                       "evaluations": 4}]
    assert "No completed evaluations under this setting" in ready("workloads", "scores", WORKLOAD, check=True).stdout

    older = ready.json("workloads", "scores", WORKLOAD, "--dataset", "held-out-1", "--grader", scored["grader"])
    assert older["setting"]["current"] is False
    assert {c["config"] for c in older["tables"][0]["columns"]} == {"three-steps-v2", "four-steps"}
    assert "(an older setting)" in ready("workloads", "scores", WORKLOAD, "--dataset", "held-out-1", "--grader",
                                         scored["grader"], check=True).stdout

    # An evaluation under the new setting (its dataset and grader from the workload) fills the new table only.
    new = ready.json("evaluations", "start", "--model", scored["runs"]["D"], "--max-new-tokens", MAX_NEW, "--wait", "-q")
    assert new["phase"] == "COMPLETED" and new["dataset"]["hash"] == workload["evaluation"]["dataset"]
    table = ready.json("workloads", "scores", WORKLOAD)["tables"][0]
    assert table["baseline"] is None and [c["evaluationId"] for c in table["columns"]] == [new["evaluationId"]]

    # The same setting again changes nothing: no history entry, the table stays.
    ready("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out-2", "--grader", scored["grader"], check=True)
    again = ready.json("workloads", "get", WORKLOAD)
    assert again["history"] == workload["history"] and again["evaluationHistory"] == workload["evaluationHistory"]


@pytest.mark.parametrize("args,words", [
    (["set-evaluation", WORKLOAD, "--dataset", "held-out-1", "--grader", "regex:x"], "grader: 'regex:x' is not a grader"),
    (["set-evaluation", WORKLOAD, "--dataset", "held-out-1", "--grader", "rule:relative.py"], "absolute"),
    (["set-evaluation", WORKLOAD, "--dataset", "no-such-dataset"], "no-such-dataset"),
    (["set-evaluation", WORKLOAD, "--dataset", "held-out-1", "--grader-instructions", "INSTR"], "graderInstructions"),
    (["scores", WORKLOAD, "--grader", "regex:x"], "grader: 'regex:x' is not a grader"),
    (["scores", WORKLOAD, "--dataset", "no-such-dataset"], "no-such-dataset"),
    (["scores", "no-such-workload"], "no-such-workload"),
])
def test_bad_settings_and_queries_are_refused_by_name_and_change_nothing(ready, scored, tmp_path, args, words):
    instructions = tmp_path / "instructions.txt"
    instructions.write_text("Be strict.")
    args = [str(instructions) if a == "INSTR" else a for a in args]
    before = ready.json("workloads", "get", WORKLOAD)
    out = ready("workloads", *args)
    assert out.returncode != 0 and words in out.stderr, out.stderr
    assert ready.json("workloads", "get", WORKLOAD) == before


def test_judge_instructions_belong_to_the_setting(ready, scored, tmp_path):
    """A model: grader's instructions are part of the setting: an evaluation started without a grader
    takes the workload's grader and instructions, and says where they came from."""
    instructions = tmp_path / "instructions.txt"
    instructions.write_text("Score 1 when the label is right.")
    before = ready.json("workloads", "get", WORKLOAD)
    undeclared = ready("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out-2", "--grader", "model:judge-y",
                       "--grader-instructions", instructions)
    assert undeclared.returncode == 1 and "judge 'judge-y' is not declared" in undeclared.stderr, undeclared.stderr
    assert ready.json("workloads", "get", WORKLOAD) == before

    ready("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out-2", "--grader", "model:judge-x",
          "--grader-instructions", instructions, check=True)
    setting = ready.json("workloads", "get", WORKLOAD)["evaluation"]
    assert setting["grader"] == "model:judge-x" and setting["graderInstructions"] == instructions.read_text()
    done = ready.json("evaluations", "start", "--model", scored["runs"]["D"], "--max-new-tokens", 4, "--wait", "-q")
    assert done["phase"] == "COMPLETED", done
    assert done["grader"] == {"kind": "model:judge-x", "graderInstructions": instructions.read_text()}
    assert done["graderInstructionsSource"] == "workload"
    assert "Grader instructions" in ready("evaluations", "get", done["evaluationId"], check=True).stdout
    # The judge never answered: every row is unscored by cause, none counts as a low score.
    assert done["report"]["meanScore"] is None and done["report"]["scoredRows"] == 0
    assert sum(done["report"]["unscored"].values()) == 6
    doc = ready.json("workloads", "scores", WORKLOAD)
    assert doc["setting"]["graderInstructions"] == instructions.read_text()
    assert [c["evaluationId"] for c in doc["tables"][0]["columns"]] == [done["evaluationId"]]
    # The previous setting (held-out-2 with the overlap rule) is now an older one, with its evaluation.
    assert {"dataset": setting["dataset"], "grader": scored["grader"], "hasInstructions": False,
            "evaluations": 1} in doc["otherSettings"]
