"""`trainer runs sweep --compare` (issue 29) through the real CLI against a real trainerd running
the real jobs: the sweep's children are waited for, then compared with the source snapshot on a
dataset by the comparisons machinery (docs/comparisons.md); repeating the command starts neither a
child nor the comparison twice; bad --compare requests are refused by name before any child
starts."""
from __future__ import annotations

import json

import pytest

from cli_support import EXAMPLES, count_runs, grid_file, plan_text, start_run, snapshot_at

pytestmark = pytest.mark.timeout(1200)

HELD_OUT = 6
MAX_NEW = 8
GRID = """axes:
  - path: hyperparams.optimizer.learningRate
    values: [0.02, 0.0005]
"""


@pytest.fixture(scope="module")
def source(ready, tmp_path_factory):
    """A completed parent run, its snapshot at step 2, and a held-out dataset of 6 rows."""
    folder = tmp_path_factory.mktemp("sweep-compare")
    rows = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()[-HELD_OUT:]
    data = folder / "held-out.jsonl"
    data.write_text("\n".join(rows) + "\n")
    ready("datasets", "create", "-f", data, "--name", "held-out", check=True)
    parent = start_run(ready, plan_text(4, save_every=2, keep_adapters=100, keep_training_states=100), "--wait")
    assert parent["phase"] == "COMPLETED", parent.get("failureReason")
    return {"parent": parent["runId"], "snapshot": snapshot_at(ready, parent["runId"], 2)["snapshotId"],
            "grid": grid_file(folder, GRID)}


def sweep_args(source: dict, *extra) -> list:
    return ["runs", "sweep", source["parent"], "--snapshot", source["snapshot"][:12], "--steps", 2,
            "--grid", source["grid"], *extra]


def test_a_sweep_with_compare_waits_for_its_children_then_compares_them_with_the_source(ready, source):
    comparisons_before = ready.json("comparisons", "list")["total"]
    args = sweep_args(source, "--compare", "--dataset", "held-out", "--max-new-tokens", MAX_NEW, "--submission-id",
                      "lr-fan", "--exit-status")
    out = ready(*args, "-o", "json", timeout=1100)
    assert out.returncode == 0, out.stdout + out.stderr
    answer = json.loads(out.stdout)
    points = answer["sweep"]["points"]
    assert [p["run"]["phase"] for p in points] == ["COMPLETED", "COMPLETED"], points
    children = [p["runId"] for p in points]
    comparison = answer["comparison"]
    assert comparison["phase"] == "COMPLETED", comparison
    assert comparison["source"]["snapshotId"] == source["snapshot"]
    assert comparison["contract"]["dataset"]["ref"] == "held-out" and comparison["contract"]["maxNewTokens"] == MAX_NEW
    targets = comparison["targets"]
    assert [t["kind"] for t in targets] == ["source", "branch", "branch"]
    assert sorted(t["runId"] for t in targets[1:]) == sorted(children)
    assert all(t["status"] == "COMPLETED" for t in targets), targets
    # It is the comparisons machinery's own record.
    assert ready.json("comparisons", "get", comparison["comparisonId"]) == comparison
    assert ready.json("comparisons", "list")["total"] == comparisons_before + 1

    # The same command again: no child and no comparison starts twice; the text view shows both.
    runs = count_runs(ready)
    again = ready(*args, timeout=1100)
    assert again.returncode == 0, again.stdout + again.stderr
    assert count_runs(ready) == runs
    assert ready.json("comparisons", "list")["total"] == comparisons_before + 1
    assert "POINT" in again.stdout and "VALUES" in again.stdout, again.stdout
    assert f"Comparison  {comparison['comparisonId']}" in again.stdout or comparison["comparisonId"] in again.stdout
    assert "VS SOURCE" in again.stdout and "Winner" in again.stdout, again.stdout


@pytest.mark.parametrize("extra, code, message", [
    (["--compare"], 2, "runs sweep --compare needs --dataset DATASET"),
    (["--compare", "--dataset", "no-such-rows"], 1, "no-such-rows"),
    (["--compare", "--dataset", "held-out", "--dry-run"], 2, "--dry-run starts nothing to compare; drop --compare"),
    (["--compare", "--dataset", "held-out", "--max-new-tokens", "0"], 2, "--max-new-tokens must be at least 1, got 0"),
    (["--dataset", "held-out"], 2, "--dataset"),
    (["--exit-status"], 2, "--exit-status applies with --wait or --compare"),
])
def test_bad_compare_requests_are_refused_by_name_before_any_child_starts(ready, source, extra, code, message):
    runs = count_runs(ready)
    out = ready(*sweep_args(source, *extra))
    assert out.returncode == code and message in out.stderr, out.stdout + out.stderr
    assert count_runs(ready) == runs
