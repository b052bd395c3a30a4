"""`trainer comparisons` (issue 12, docs/comparisons.md) through the real CLI against a real trainerd
running the real jobs: a source snapshot scored against branches trained from it, under one pinned
contract.

A comparison of a snapshot and two branches ends COMPLETED with each target's mean score equal to a
standalone `evaluations start` of the same model, dataset and grader, each target's paired-bootstrap
interval against the source equal to numpy's on the same rows, and names the highest as the winner
only when its lead is larger than chance ("no clear winner" otherwise); its config differences name
the learning rate, the step budget and the restore mode; its spend says CPU time for CPU runs. One
with a cancelled branch (no model) ends PARTIAL, names none, and reuses the evaluations of the same
contract made before instead of running them again. The workload's score table shows each column's
interval against the baseline, and two configurations never share a header; bad requests are
refused by field and create nothing; a submission token makes create idempotent; trainerd killed
with SIGKILL mid-comparison carries on after a restart and evaluates no target twice."""
from __future__ import annotations

import json
import os
import signal
import urllib.request

import pytest

from bootstrap_check import assert_same, interval, row_scores
from cli_support import EXAMPLES, MODEL_NAME, WORKLOAD, Cli, start_trainerd, stop, wait_for

pytestmark = pytest.mark.timeout(1200)  # its runs are waited for up to 900 s each (run_to_end)

MAX_NEW = 8
HELD_OUT = 6
# The share of the expected answer's distinct characters that the answer contains.
RULE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info):
    wanted = set(ground_truth)
    return len(wanted & set(solution_str)) / len(wanted) if wanted else 0.0
'''


def plan(max_steps: int, save_every: int, config_name: str | None = None) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}",
        *([f"configName: {config_name}"] if config_name else []), "config:",
        "  dataset: sentiment-train", "  hyperparams:",
        "    optimizer: {learningRate: 0.003, schedule: constant, warmupSteps: 0}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4}}", "  maxSeqLength: 128",
        "  model: {precision: FP32}",
        f"execution: {{gpus: 0, saveEvery: {save_every}, keepAdapters: 100, keepTrainingStates: 100}}",
    ]) + "\n"


def held_out_rows(n: int) -> list[dict]:
    rows = [json.loads(line) for line in (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()]
    return rows[-n:]


def run_to_end(cli, run_id: str) -> dict:
    run = wait_for(lambda: (r := cli.json("runs", "get", run_id))["phase"] in ("COMPLETED", "FAILED", "CANCELLED") and r,
                   what=f"run {run_id} to end", timeout=900)
    return run


def comparison_ended(cli, cid: str, timeout: float = 900) -> dict:
    return wait_for(lambda: (c := cli.json("comparisons", "get", cid))["phase"] in ("COMPLETED", "PARTIAL", "FAILED") and c,
                    what=f"comparison {cid} to end", timeout=timeout)


def comparisons_total(cli) -> int:
    return cli.json("comparisons", "list")["total"]


@pytest.fixture(scope="module")
def trainerd(bin_dir, sharp_model, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(sharp_model)}]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def family(ready, tmp_path_factory):
    """A parent run, its snapshot at step 2, two completed branches from it with different learning
    rates, and a third branch cancelled before it could finish (so it has no model)."""
    folder = tmp_path_factory.mktemp("comparisons")
    data = folder / "held-out.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in held_out_rows(HELD_OUT)))
    ready("datasets", "create", "-f", data, "--name", "held-out", check=True)
    rule = folder / "overlap.py"
    rule.write_text(RULE)
    parent_id = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan(4, 2, "base-lr"),
                      check=True).stdout.strip()
    parent = run_to_end(ready, parent_id)
    assert parent["phase"] == "COMPLETED", parent.get("failureReason")
    snapshots = ready.json("runs", "snapshots", parent_id)["snapshots"]
    source = next(s for s in snapshots if s["savedStep"] == 2)
    branches = []
    for lr in ("0.02", "0.0005"):
        overrides = folder / f"lr-{lr}.yaml"
        overrides.write_text(f"hyperparams.optimizer.learningRate: {lr}\n")
        out = ready.json("runs", "branch", parent_id, "--snapshot", source["snapshotId"], "--steps", "3",
                         "--overrides", overrides)
        branches.append(out["runId"])
    cancelled = ready.json("runs", "branch", parent_id, "--snapshot", source["snapshotId"], "--steps", "5000")["runId"]
    ready("runs", "cancel", cancelled, "--force", check=True)
    for b in branches:
        run = run_to_end(ready, b)
        assert run["phase"] == "COMPLETED", run.get("failureReason")
    assert run_to_end(ready, cancelled)["phase"] == "CANCELLED"
    return {"parent": parent, "source": source["snapshotId"], "branches": branches, "cancelled": cancelled,
            "rule": rule, "grader": f"rule:{rule}"}


def test_a_snapshot_and_two_branches_complete_each_scored_as_a_standalone_evaluation_and_the_best_wins(ready, family,
                                                                                                     trainerd):
    args = ["--source", family["source"][:12], "--all-branches", family["parent"]["runId"][:8], "--dataset", "held-out",
            "--grader", family["grader"], "--max-new-tokens", MAX_NEW, "--submission-id", "fan"]
    created = ready.json("comparisons", "create", *args)
    assert created["phase"] == "PREPARING"
    assert created["fan"] == [{"parentRunId": family["parent"]["runId"], "seen": 2}]  # not the cancelled one
    held_out = ready.json("datasets", "get", "held-out")
    assert created["contract"] == {"dataset": {"ref": "held-out", "hash": held_out["hash"], "rows": HELD_OUT},
                                   "grader": {"kind": family["grader"]}, "graderSource": "request",
                                   "maxNewTokens": MAX_NEW}
    text = ready("comparisons", "create", *args, check=True).stdout  # the same request: the same comparison
    assert f"Comparison {created['comparisonId']}" in text and "Fan: 2 completed branch(es)" in text, text

    done = comparison_ended(ready, created["comparisonId"])
    assert done["phase"] == "COMPLETED", done
    targets = done["targets"]
    assert [t["kind"] for t in targets] == ["source", "branch", "branch"]
    assert sorted(t["runId"] for t in targets[1:]) == sorted(family["branches"])
    assert all(t["status"] == "COMPLETED" and t["failure"] is None for t in targets)
    source_model = ready.json("trained-models", "get", targets[0]["modelId"])
    assert source_model["protected"] is True and source_model["status"] == "REGISTERED"
    assert {"comparisonId": done["comparisonId"]} in source_model["protectedBy"]
    assert source_model["source"]["snapshotId"] == family["source"]

    means = []
    for t in targets:
        assert t["progress"] == {"rowsDone": HELD_OUT, "rowsTotal": HELD_OUT}
        evaluation = ready.json("evaluations", "get", t["evaluationId"])
        assert evaluation["dataset"]["hash"] == held_out["hash"] and evaluation["maxNewTokens"] == MAX_NEW
        assert evaluation["grader"]["kind"] == family["grader"]
        alone = ready.json("evaluations", "start", "--model", t["modelId"], "--dataset", "held-out", "--grader",
                           family["grader"], "--max-new-tokens", MAX_NEW, "--wait", "-q", timeout=600)
        assert alone["phase"] == "COMPLETED", alone
        assert t["meanScore"] == pytest.approx(alone["report"]["meanScore"], abs=1e-12)
        assert t["exactMatch"] == alone["report"]["exactMatchRate"]
        means.append(t["meanScore"])
    assert len(set(means)) > 1, f"the targets must score differently for a winner to mean anything: {means}"
    best = max(range(len(means)), key=lambda i: (means[i], -i))
    # Each target's interval against the source, recomputed with numpy from the same rows.
    scores = [row_scores(ready, t["evaluationId"]) for t in targets]
    assert targets[0]["versusSource"] is None
    for i in (1, 2):
        assert_same(targets[i]["versusSource"], interval(scores[i], scores[0]))
    assert done["statistics"] == {"method": "paired bootstrap", "resamples": 2000, "confidence": 0.95,
                                  "seed": 20261204, "pairing": "rows both evaluations scored, by dataset line"}
    # A winner only when the best is ahead of every other target by more than chance.
    clear = all(interval(scores[best], scores[j])["low"] > 0 for j in range(len(targets)) if j != best)
    named = {"target": targets[best]["target"], "kind": targets[best]["kind"], "modelId": targets[best]["modelId"],
             "meanScore": means[best]}
    if clear:
        assert done["outcome"] == "winner" and done["winner"] == named and done["leader"] is None, done
    else:
        assert done["outcome"] == "noClearWinner" and done["winner"] is None and done["leader"] == named, done

    # Config differences against the source run's plan: the branches' learning rates and budgets.
    for t in targets[1:]:
        diffs = {d["field"]: (d["source"], d["target"]) for d in t["configDifferences"]}
        lr = ready.json("runs", "get", t["runId"])["plan"]["config"]["hyperparams"]["optimizer"]["learningRate"]
        assert diffs["config.hyperparams.optimizer.learningRate"] == (0.003, lr)
        assert diffs["config.hyperparams.training.maxSteps"] == (4, 3)
        assert diffs["lineage.restore"] == (None, "weights")  # the source is a root run's snapshot
        assert diffs["lineage.stepBudget"] == (None, 3)
    assert targets[0]["configDifferences"] == []
    # Training spend (the runs) apart from evaluation spend (the comparison's evaluations).
    cost = done["cost"]
    assert sorted(r["runId"] for r in cost["training"]["runs"]) == sorted([family["parent"]["runId"], *family["branches"]])
    assert cost["training"]["gpuSeconds"] == pytest.approx(sum(r["gpuSeconds"] for r in cost["training"]["runs"]))
    # CPU runs: device time of kind CPU; gpuSeconds is the deprecated name of the same number.
    assert all(r["deviceKind"] == "CPU" and r["deviceSeconds"] == r["gpuSeconds"] > 0 for r in cost["training"]["runs"])
    assert cost["training"]["byDeviceKind"] == {"CPU": pytest.approx(cost["training"]["deviceSeconds"])}
    assert cost["evaluation"]["byDeviceKind"] == {"CPU": pytest.approx(cost["evaluation"]["deviceSeconds"])}
    assert sorted(e["evaluationId"] for e in cost["evaluation"]["evaluations"]) == sorted(t["evaluationId"] for t in targets)
    assert cost["evaluation"]["deviceSeconds"] > 0 and cost["evaluation"]["gpuSeconds"] == 0  # one CPU slot each
    assert cost["evaluation"]["deviceSeconds"] == pytest.approx(
        sum(ready.json("evaluations", "get", t["evaluationId"])["cost"]["deviceSeconds"] for t in targets))

    # The compare operation: accepted once, one launched target per target, ended with success.
    with urllib.request.urlopen(trainerd.url + "/metrics", timeout=30) as r:
        metrics = [line for line in r.read().decode().splitlines()
                   if 'akka_optimize_training_service_operation="compare"' in line]
    launched = [line for line in metrics if 'stage="launch_target"' in line and 'outcome="success"' in line]
    assert launched and float(launched[0].split()[-1]) >= 3, metrics
    assert any('stage="accept"' in line for line in metrics), metrics
    assert any('outcome="success"' in line and "_count" in line and "stage" not in line for line in metrics), metrics

    shown = ready("comparisons", "get", done["comparisonId"][:8], check=True).stdout
    assert "Winner" in shown and "COMPLETED" in shown and "Training spend" in shown and "learningRate" in shown, shown
    assert "lineage.restore null -> weights" in shown and "lineage.stepBudget null -> 3" in shown, shown
    assert f"{HELD_OUT}/{HELD_OUT}" in shown, shown
    assert "VS SOURCE" in shown, shown
    for t in targets[1:]:
        v = t["versusSource"]
        assert f"{v['meanDifference']:+.4f} [{v['low']:+.4f}, {v['high']:+.4f}]" in shown, shown
    if clear:
        assert "ahead of every other target by more than chance (95% paired bootstrap, 2000 resamples)" in shown, shown
    else:
        assert "no clear winner: the highest mean" in shown, shown
    spend = [line for line in shown.splitlines() if "spend" in line]
    assert len(spend) == 2 and all("CPU-" in line and "GPU" not in line for line in spend), spend
    assert ready("comparisons", "get", done["comparisonId"], "--jq", ".winner.modelId",
                 check=True).stdout.strip() == (targets[best]["modelId"] if clear else "null")
    listed = ready("comparisons", "list", check=True).stdout
    assert (short(targets[best]["modelId"]) if clear else "no clear winner") in listed, listed

    # A branch's model: its cost is CPU time, never "GPU".
    model = ready.json("trained-models", "get", targets[1]["modelId"])
    run = ready.json("runs", "get", targets[1]["runId"])
    assert model["cost"] == {"deviceKind": "CPU", "deviceSeconds": run["cost"]["deviceSeconds"],
                             "gpuSeconds": run["cost"]["deviceSeconds"]}
    assert run["cost"]["deviceKind"] == "CPU" and run["cost"]["gpuSeconds"] == run["cost"]["deviceSeconds"]
    text = ready("trained-models", "get", targets[1]["modelId"], check=True).stdout
    cost_line = next(line for line in text.splitlines() if line.strip().startswith("Cost"))
    assert "CPU-" in cost_line and "GPU" not in text, text


def short(ident: str) -> str:
    return ident[:12]  # the CLI's short ids


def test_a_branch_is_named_by_its_own_settings_and_the_score_table_shows_intervals_and_distinct_headers(ready, family):
    # A child's default name: its parent's, with what its settings change.
    for run_id, lr in zip(family["branches"], ("0.02", "0.0005")):
        assert ready.json("runs", "get", run_id)["configName"] == f"base-lr (learningRate={lr}, maxSteps=3)"
    # One branch named like its parent by hand: two settings hashes, one name.
    ready("runs", "annotate", family["branches"][1], "--config-name", "base-lr", check=True)
    baseline = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD, "--dataset", "held-out",
                          "--grader", family["grader"], "--max-new-tokens", MAX_NEW, "--wait", "-q", timeout=600)
    assert baseline["phase"] == "COMPLETED", baseline
    for run_id in family["branches"]:  # each branch's final model scored under the same setting
        model = ready.json("runs", "get", run_id)["modelId"]
        e = ready.json("evaluations", "start", "--model", model, "--dataset", "held-out", "--grader", family["grader"],
                       "--max-new-tokens", MAX_NEW, "--wait", "-q", timeout=600)
        assert e["phase"] == "COMPLETED", e
    args = ["workloads", "scores", WORKLOAD, "--dataset", "held-out", "--grader", family["grader"]]
    table = ready.json(*args)["tables"][0]
    assert table["baseline"]["evaluationId"] == baseline["evaluationId"]
    base_rows = row_scores(ready, baseline["evaluationId"])
    columns = table["columns"]
    headers = [c["config"] for c in columns]
    assert len(set(headers)) == len(headers), headers
    shas = {c["settingsSha"] for c in columns}
    assert len(shas) == len(columns) >= 3, columns
    parent_sha = ready.json("runs", "get", family["parent"]["runId"])["settingsSha"]
    renamed_sha = ready.json("runs", "get", family["branches"][1])["settingsSha"]
    assert f"base-lr ({parent_sha[:8]})" in headers and f"base-lr ({renamed_sha[:8]})" in headers, headers
    assert "base-lr (learningRate=0.02, maxSteps=3)" in headers, headers
    for c in columns:
        assert_same(c["versusBaseline"], interval(row_scores(ready, c["evaluationId"]), base_rows))
    text = ready(*args, check=True).stdout
    assert "95% INTERVAL" in text and f"base-lr ({parent_sha[:8]})" in text, text
    for c in columns:
        v = c["versusBaseline"]
        assert f"[{v['low']:+.4f}, {v['high']:+.4f}] {v['verdict']}" in text, text


def test_a_cancelled_branch_is_a_refused_target_and_the_comparison_ends_partial_without_a_winner(ready, family):
    model = ready.json("runs", "get", family["branches"][0])["modelId"]
    evaluations_before = len(ready.json("evaluations", "list", "--limit", "1000")["evaluations"])
    # The branch's model named again as a candidate is scored once.
    created = ready.json("comparisons", "create", "--source", family["source"], "--branch", family["branches"][0],
                         "--branch", family["cancelled"], "--candidate", model[:10], "--dataset", "held-out",
                         "--grader", family["grader"], "--max-new-tokens", MAX_NEW)
    assert [t["kind"] for t in created["targets"]] == ["source", "candidate", "branch"]
    assert created["targets"][1]["modelId"] == model and created["targets"][1]["runId"] == family["branches"][0]
    refused = created["targets"][2]
    assert refused["status"] == "REFUSED" and refused["runId"] == family["cancelled"]
    assert "CANCELLED" in refused["failure"] and family["cancelled"] in refused["failure"]
    done = comparison_ended(ready, created["comparisonId"])
    assert done["phase"] == "PARTIAL", done
    assert done["winner"] is None
    assert [t["status"] for t in done["targets"]] == ["COMPLETED", "COMPLETED", "REFUSED"]
    assert done["outcome"] == "incomplete"
    # The source's and the candidate's models were scored under this very contract before: reused.
    assert [t["reused"] for t in done["targets"]] == [True, True, False]
    assert len(ready.json("evaluations", "list", "--limit", "1000")["evaluations"]) == evaluations_before
    for t in done["targets"][:2]:
        e = ready.json("evaluations", "get", t["evaluationId"])
        assert e["phase"] == "COMPLETED" and e["model"]["modelId"] == t["modelId"] and e["createdAt"] < created["createdAt"]
        assert e["dataset"]["ref"] and e["maxNewTokens"] == MAX_NEW and e["grader"]["kind"] == family["grader"]
    assert done["cost"]["evaluation"]["evaluations"][0]["reused"] is True
    shown = ready("comparisons", "get", created["comparisonId"], check=True).stdout
    assert "none named" in shown and "CANCELLED" in shown, shown
    assert "Reused evaluations:" in shown and "already scored this model under this contract; reused, not run again" in shown
    # The rule file changed: the contract is no longer the same, and the model is scored again.
    family["rule"].write_text(RULE + "\n# changed\n")
    again = ready.json("comparisons", "create", "--source", family["source"], "--candidate", model, "--dataset",
                       "held-out", "--grader", family["grader"], "--max-new-tokens", MAX_NEW)
    rescored = comparison_ended(ready, again["comparisonId"])
    assert rescored["phase"] == "COMPLETED" and [t["reused"] for t in rescored["targets"]] == [False, False], rescored
    assert len(ready.json("evaluations", "list", "--limit", "1000")["evaluations"]) == evaluations_before + 2
    request = ["--source", family["source"], "--branch", family["cancelled"], "--dataset", "held-out", "--grader",
               family["grader"], "--max-new-tokens", MAX_NEW, "--submission-id", "refused"]
    again = ready("comparisons", "create", *request, check=True).stdout
    assert f"Refused target {family['cancelled']}: run {family['cancelled']} is CANCELLED" in again, again
    assert comparison_ended(ready, ready.json("comparisons", "create", *request)["comparisonId"])["phase"] == "PARTIAL"


def test_a_comparison_whose_every_evaluation_is_cancelled_ends_failed_naming_each_failure(ready, family):
    created = ready.json("comparisons", "create", "--source", family["source"], "--branch", family["branches"][1],
                         "--dataset", "sentiment-train", "--max-new-tokens", 64)  # long enough to cancel
    cid = created["comparisonId"]

    def cancel_what_runs():
        c = ready.json("comparisons", "get", cid)
        for t in c["targets"]:
            if t["status"] == "EVALUATING":
                ready("evaluations", "cancel", t["evaluationId"], "--force")
        return c["phase"] in ("COMPLETED", "PARTIAL", "FAILED") and c

    done = wait_for(cancel_what_runs, 600, f"comparison {cid} to end")
    assert done["phase"] == "FAILED", done
    assert done["winner"] is None
    for t in done["targets"]:
        assert t["status"] == "FAILED" and t["meanScore"] is None
        assert t["failure"] == f"evaluation {t['evaluationId']} ended CANCELLED", t


@pytest.mark.parametrize("args,field,words", [
    (["--source", "SOURCE", "--dataset", "held-out"], "targets", "at least one target"),
    (["--source", "0123456789abcdef", "--branch", "BRANCH", "--dataset", "held-out"], "source", "no snapshot"),
    (["--source", "SOURCE", "--dataset", "held-out", *["--branch", "BRANCH"] * 51], "branches", "at most 50"),
    (["--source", "SOURCE", "--branch", "BRANCH", "--dataset", "no-such-dataset"], "dataset", "no-such-dataset"),
    (["--source", "SOURCE", "--branch", "feedface", "--dataset", "held-out"], "branches", "feedface"),
    (["--source", "SOURCE", "--candidate", "feedface", "--dataset", "held-out"], "candidates", "feedface"),
    (["--source", "SOURCE", "--branch", "BRANCH", "--dataset", "held-out", "--grader", "regex:x"], "grader", "regex:x"),
    (["--source", "SOURCE", "--branch", "BRANCH", "--dataset", "held-out", "--max-new-tokens", "100000"],
     "maxNewTokens", "4096"),
])
def test_bad_requests_are_refused_by_field_and_create_nothing(ready, family, args, field, words):
    args = [family["source"] if a == "SOURCE" else family["branches"][0] if a == "BRANCH" else a for a in args]
    before = comparisons_total(ready)
    evaluations = len(ready.json("evaluations", "list", "--limit", "1000")["evaluations"])
    models = ready.json("trained-models", "list")["models"]
    out = ready("comparisons", "create", *args)
    assert out.returncode == 1, out.stdout
    assert field in out.stderr and words in out.stderr, out.stderr
    assert comparisons_total(ready) == before
    assert len(ready.json("evaluations", "list", "--limit", "1000")["evaluations"]) == evaluations
    assert ready.json("trained-models", "list")["models"] == models  # the source was not registered nor marked


def test_the_same_submission_token_names_the_same_comparison_created_once(ready, family):
    args = ["--source", family["source"], "--branch", family["branches"][1], "--dataset", "held-out",
            "--grader", family["grader"], "--max-new-tokens", MAX_NEW, "--submission-id", "nightly-7"]
    before = comparisons_total(ready)
    first = ready.json("comparisons", "create", *args)
    again = ready.json("comparisons", "create", *args)
    assert again["comparisonId"] == first["comparisonId"] and again["submissionId"] == "nightly-7"
    assert comparisons_total(ready) == before + 1
    other = ready("comparisons", "create", *args[:-2], "--max-new-tokens", "9", "--submission-id", "nightly-7")
    assert other.returncode == 1 and "submissionId" in other.stderr and first["comparisonId"] in other.stderr, other.stderr
    assert comparisons_total(ready) == before + 1
    comparison_ended(ready, first["comparisonId"])

    # Listing: newest first, by source, paged with the next offset printed.
    second = ready.json("comparisons", "create", *args[:-1], "nightly-8")
    listed = ready.json("comparisons", "list", "--source", family["source"][:10])
    assert [c["comparisonId"] for c in listed["comparisons"]][:2] == [second["comparisonId"], first["comparisonId"]]
    assert all(c["source"]["snapshotId"] == family["source"] for c in listed["comparisons"])
    page = ready.json("comparisons", "list", "--limit", 1)
    assert len(page["comparisons"]) == 1 and page["nextOffset"] == 1 and page["total"] == listed["total"]
    text = ready("comparisons", "list", "--limit", 1, check=True).stdout
    assert "--offset 1" in text, text
    bad = ready("comparisons", "list", "--limit", 101)
    assert bad.returncode == 1 and "limit" in bad.stderr


def test_trainerd_killed_mid_comparison_carries_on_after_a_restart_and_evaluates_no_target_twice(bin_dir, tiny_model,
                                                                                                   tmp_path):
    """Killed in the worst place: right after a target's evaluation started running (the task
    kernel's hook TRAINER_TEST_KILL_AFTER=evaluation:RUNNING), its job killed with trainerd."""
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    os.environ["TRAINER_TEST_KILL_AFTER"] = "evaluation:RUNNING"
    try:
        service = start_trainerd(bin_dir, tmp_path / "svc", config)
    finally:
        del os.environ["TRAINER_TEST_KILL_AFTER"]
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", "sentiment-train", check=True)
        data = tmp_path / "rows.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in held_out_rows(40)))
        cli("datasets", "create", "-f", data, "--name", "rows", check=True)
        cli("workloads", "create", WORKLOAD, check=True)
        run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan(2, 1), check=True).stdout.strip()
        assert run_to_end(cli, run_id)["phase"] == "COMPLETED"
        source = next(s for s in cli.json("runs", "snapshots", run_id)["snapshots"] if s["savedStep"] == 1)
        # The run's own final model against its first snapshot.
        request = ["--source", source["snapshotId"], "--branch", run_id, "--dataset", "rows", "--max-new-tokens", 24,
                   "--submission-id", "kill-test"]
        # The kill may come before trainerd has answered (the CLI says the connection dropped, exit
        # 6): the comparison is stored either way, and its submission id finds it after the restart.
        out = cli("comparisons", "create", *request, "-o", "json")
        assert out.returncode in (0, 6), out.stderr
        cid = json.loads(out.stdout)["comparisonId"] if out.returncode == 0 else None
        service.proc.wait(timeout=300)
        assert service.proc.returncode == -signal.SIGKILL
        assert "test hook: killed after evaluation " in (tmp_path / "svc" / "trainerd.log").read_text()
        service = start_trainerd(bin_dir, tmp_path / "svc", config)
        cli = Cli(bin_dir / "trainer", service.url)
        if cid is None:
            cid = cli.json("comparisons", "create", *request)["comparisonId"]
        done = comparison_ended(cli, cid)
        assert done["phase"] == "COMPLETED", done
        assert [p["phase"] for p in done["phaseHistory"]].count("COMPLETED") == 1
        ids = [t["evaluationId"] for t in done["targets"]]
        # One evaluation per target, none started twice, each over every row.
        listed = [e["evaluationId"] for e in cli.json("evaluations", "list", "--limit", "1000")["evaluations"]]
        assert sorted(listed) == sorted(ids) and len(set(ids)) == 2
        assert all(cli.json("evaluations", "get", e)["report"]["rows"] == 40 for e in ids)
        # The same request again, after the restart, is the same comparison.
        assert cli.json("comparisons", "create", *request)["comparisonId"] == cid
        assert cli.json("comparisons", "list")["total"] == 1
    finally:
        stop(service.proc, service.data_dir)
