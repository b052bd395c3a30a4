"""Child runs and lineage end to end, through the real `trainer` CLI against a real trainerd running
the real job (docs/lineage.md): a `trainingState` continuation of an uninterrupted run's snapshot
trains exactly the losses (and the final adapter) of that run's later steps, bit for bit in fp32 on
the CPU; a `weights` branch starts a fresh optimizer and data order from the same adapter; bad
overrides are refused by name and create nothing; the family views list what was started."""
from __future__ import annotations

import json

import pytest

from cli_support import (GRID, adapter_bytes, count_runs, ended, get_run, grid_file, losses, plan_text, snapshot_at,
                         start_run_id)

pytestmark = pytest.mark.timeout(1200)  # its runs are waited for up to 1000 s each (ended, continuation)

STEPS = 16
SAVE_EVERY = 4
SOURCE_STEP = 8  # the parent's snapshot the children start from


def plan(max_steps: int = STEPS, save_every: int = SAVE_EVERY, keep: int = 100, keep_states: int = 100) -> str:
    # A constant schedule without warmup: a child's schedule spans its own budget, so only a
    # constant rate lets a continuation match the parent's later steps.
    return plan_text(max_steps, save_every=save_every, keep_adapters=keep, keep_training_states=keep_states,
                     optimizer="{learningRate: 0.003, schedule: constant, warmupSteps: 0}")


@pytest.fixture(scope="module")
def parent(ready):
    """The uninterrupted run every child is compared with, and its snapshot at SOURCE_STEP."""
    run = ended(ready, start_run_id(ready, plan()))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    return run, losses(ready, run["runId"]), snapshot_at(ready, run["runId"], SOURCE_STEP)


@pytest.fixture(scope="module")
def continuation(ready, parent):
    run, _, snap = parent
    budget = STEPS - SOURCE_STEP
    out = ready("runs", "continue", run["runId"][:8], "--snapshot", snap["snapshotId"][:12], "--steps", str(budget),
                "--wait", "--exit-status", timeout=1000)
    assert out.returncode == 0, out.stdout + out.stderr
    child = ready.json("runs", "branches", run["runId"])["branches"][0]
    return ended(ready, child["runId"])


def test_a_training_state_continuation_trains_exactly_the_parents_later_steps(ready, parent, continuation):
    run, parent_losses, snap = parent
    child = continuation
    assert child["phase"] == "COMPLETED", child.get("failureReason")
    assert child["parentRunId"] == run["runId"] and child["sourceSnapshotId"] == snap["snapshotId"]
    assert child["sourceStep"] == SOURCE_STEP and child["restore"] == "trainingState"
    assert child["plan"]["config"]["hyperparams"]["training"]["maxSteps"] == STEPS - SOURCE_STEP
    child_losses = losses(ready, child["runId"])
    assert sorted(child_losses) == list(range(1, STEPS - SOURCE_STEP + 1))  # the child counts from zero
    for k, loss in child_losses.items():  # bit for bit, step by step
        assert loss == parent_losses[SOURCE_STEP + k], (k, loss, parent_losses[SOURCE_STEP + k])
    assert adapter_bytes(child) == adapter_bytes(run)
    # The parent is unchanged.
    assert get_run(ready, run["runId"])["progress"] == run["progress"]


def test_continue_picks_the_newest_snapshot_with_training_state(ready, parent):
    run, _, _ = parent
    out = ready("runs", "continue", run["runId"], "--steps", "3", "--dry-run", "-o", "json")
    assert out.returncode == 0, out.stderr
    answer = json.loads(out.stdout)
    assert answer["child"]["sourceStep"] == STEPS  # the final snapshot holds both kinds
    assert answer["plan"]["config"]["hyperparams"]["training"]["maxSteps"] == 3


def test_a_weights_branch_starts_a_fresh_optimizer_from_the_same_adapter(ready, parent, continuation):
    run, parent_losses, snap = parent
    out = ready("runs", "branch", run["runId"], "--snapshot", snap["snapshotId"], "--steps", "4",
                "--restore", "weights", "-o", "json")
    assert out.returncode == 0, out.stderr
    child = ended(ready, json.loads(out.stdout)["runId"])
    assert child["phase"] == "COMPLETED", child.get("failureReason")
    assert child["restore"] == "weights"
    branch = losses(ready, child["runId"])
    cont = losses(ready, continuation["runId"])
    # A fresh data order: its first batch is the parent's first batch, not the continuation's ...
    assert branch[1] != cont[1]
    # ... seen through the snapshot's trained adapter, not a fresh one.
    assert branch[1] < parent_losses[1] - 0.05, (branch[1], parent_losses[1])
    # A fresh optimizer and schedule on the same weights: the steps that follow differ too.
    assert [branch[k] for k in (2, 3, 4)] != [cont[k] for k in (2, 3, 4)]


def test_dry_run_shows_the_resolved_child_plan_and_creates_nothing(ready, parent, tmp_path):
    run, _, snap = parent
    overrides = tmp_path / "lr.yaml"
    overrides.write_text("hyperparams.optimizer.learningRate: 5.0e-5\n")
    before = count_runs(ready)
    out = ready("runs", "branch", run["runId"], "--snapshot", snap["snapshotId"][:10], "--steps", "200",
                "--overrides", str(overrides), "--dry-run")
    assert out.returncode == 0, out.stderr
    assert "learningRate: 5e-05" in out.stdout and "maxSteps: 200" in out.stdout, out.stdout
    assert "Nothing was started" in out.stdout
    assert count_runs(ready) == before


@pytest.mark.parametrize("command,text,field", [
    (["branch", "--restore", "weights"], "hyperparams.optimizer.learningRat: 0.1\n",
     "overrides.hyperparams.optimizer.learningRat"),
    (["branch", "--restore", "trainingState"], "hyperparams:\n  training:\n    batchSize: 4\n",
     "overrides.hyperparams.training.batchSize"),
    (["continue"], "hyperparams.lora.alpha: 32\n", "overrides.hyperparams.lora.alpha"),
    (["branch"], "hyperparams.training.epochs: 3\n", "overrides.hyperparams.training.epochs"),
    (["branch"], "hyperparams.lora.rank: 16\n", "overrides.hyperparams.lora.rank"),
    (["branch"], "execution: {gpus: 2}\n", "overrides.execution"),
    (["branch"], "hyperparams.optimizer.learningRate: fast\n", "config.hyperparams.optimizer.learningRate"),
])
def test_bad_overrides_are_refused_by_name_and_nothing_is_created(ready, parent, tmp_path, command, text, field):
    run, _, snap = parent
    overrides = tmp_path / "o.yaml"
    overrides.write_text(text)
    before = count_runs(ready)
    children = ready.json("runs", "branches", run["runId"])["total"]
    out = ready("runs", command[0], run["runId"], "--snapshot", snap["snapshotId"], "--steps", "5",
                *command[1:], "--overrides", str(overrides))
    assert out.returncode != 0
    assert field in out.stderr, out.stderr
    assert count_runs(ready) == before
    assert ready.json("runs", "branches", run["runId"])["total"] == children
    assert not ready.json("snapshots", "get", snap["snapshotId"])["heldBy"]  # no hold left behind


def test_a_run_without_training_state_cannot_be_continued_and_says_why(ready):
    run_id = start_run_id(ready, plan(max_steps=5000, save_every=4000))  # nothing saved for a long while
    try:
        out = ready("runs", "continue", run_id, "--steps", "5")
        assert out.returncode != 0
        assert "cannot be continued" in out.stderr and "holds training state" in out.stderr, out.stderr
        assert "runs branch" in out.stderr  # what to do instead
    finally:
        ready("runs", "cancel", run_id, "--force", check=True)
        ended(ready, run_id)


def test_the_family_views_list_children_descendants_and_ancestry(ready, parent, continuation):
    run, _, _ = parent
    root = run["runId"]
    # A grandchild: the continuation continued again from its own final snapshot.
    out = ready("runs", "continue", continuation["runId"], "--steps", "2", "-o", "json")
    assert out.returncode == 0, out.stderr
    grandchild = ended(ready, json.loads(out.stdout)["runId"])
    assert grandchild["phase"] == "COMPLETED", grandchild.get("failureReason")
    assert grandchild["rootRunId"] == root

    # A second child of the root (whatever other tests of this module ran first), for the paging.
    run, _, snap = parent
    out = ready("runs", "branch", root, "--snapshot", snap["snapshotId"], "--steps", "1", "-o", "json")
    assert out.returncode == 0, out.stderr
    ended(ready, json.loads(out.stdout)["runId"])

    branches = ready.json("runs", "branches", root)
    assert branches["total"] >= 2
    assert continuation["runId"] in [b["runId"] for b in branches["branches"]]
    assert all(b["parentRunId"] == root for b in branches["branches"])
    page = ready.json("runs", "branches", root, "--limit", "1")
    assert len(page["branches"]) == 1 and page["nextOffset"] == 1 and page["total"] == branches["total"]

    tree = ready.json("runs", "tree", root)["runs"]
    depth = {r["runId"]: r["depth"] for r in tree}
    assert tree[0]["runId"] == root and depth[root] == 0
    assert depth[continuation["runId"]] == 1 and depth[grandchild["runId"]] == 2
    at = [r["runId"] for r in tree]
    assert at.index(grandchild["runId"]) == at.index(continuation["runId"]) + 1  # under its parent
    assert grandchild["runId"] not in [r["runId"] for r in ready.json("runs", "tree", root, "--depth", "1")["runs"]]
    text = ready("runs", "tree", root[:8], check=True).stdout
    assert "SOURCE STEP" in text and "    " + grandchild["runId"][:8] in text, text

    out = ready("runs", "ancestry", grandchild["runId"], "--jq", ".runs[0].runId", check=True)
    assert out.stdout.strip().strip('"') == root
    chain = ready.json("runs", "ancestry", grandchild["runId"])["runs"]
    assert [r["runId"] for r in chain] == [root, continuation["runId"], grandchild["runId"]]
    assert chain[2]["sourceStep"] == STEPS - SOURCE_STEP and chain[2]["stepBudget"] == 2
    assert [r["runId"] for r in ready.json("runs", "ancestry", root)["runs"]] == [root]  # a chain of one


def test_a_sweep_starts_one_labelled_child_per_grid_point_last_axis_fastest(ready, parent, tmp_path):
    run, _, snap = parent
    grid = grid_file(tmp_path, GRID)
    before = ready.json("runs", "branches", run["runId"])["total"]
    dry = ready.json("runs", "sweep", run["runId"], "--snapshot", snap["snapshotId"], "--steps", "2", "--grid", grid,
                     "--dry-run")
    expected = [{"hyperparams.optimizer.learningRate": lr, "hyperparams.training.batchSize": bs}
                for lr in (0.001, 0.002) for bs in (2, 4)]
    assert [p["values"] for p in dry["points"]] == expected
    assert [p["plan"]["config"]["hyperparams"]["training"]["batchSize"] for p in dry["points"]] == [2, 4, 2, 4]
    assert ready.json("runs", "branches", run["runId"])["total"] == before  # a dry run starts nothing

    started = ready.json("runs", "sweep", run["runId"], "--snapshot", snap["snapshotId"], "--steps", "2",
                         "--grid", grid)
    assert started["total"] == 4
    for point in started["points"]:
        child = ended(ready, point["runId"])
        assert child["phase"] == "COMPLETED", child.get("failureReason")
        assert child["childKind"] == "sweep" and child["sweepPoint"] == point["values"]
        cfg = child["plan"]["config"]["hyperparams"]
        assert cfg["optimizer"]["learningRate"] == point["values"]["hyperparams.optimizer.learningRate"]
        assert cfg["training"]["batchSize"] == point["values"]["hyperparams.training.batchSize"]
    assert ready.json("runs", "branches", run["runId"])["total"] == before + 4


@pytest.mark.parametrize("text,field", [
    # One bad point (a learning rate out of range) refuses the whole grid.
    ("axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.001, 5]}\n",
     "config.hyperparams.optimizer.learningRate"),
    ("axes:\n  - {path: hyperparams.optimizer, values: [{learningRate: 0.1}]}\n"
     "  - {path: hyperparams.optimizer.learningRate, values: [0.2]}\n", "grid.axes[1].path"),
    ("axes:\n  - {path: hyperparams.nope, values: [1]}\n", "overrides.hyperparams.nope"),
    ("axes:\n  - {path: hyperparams.training.seed, values: [" + ", ".join(map(str, range(51))) + "]}\n", "grid"),
])
def test_a_grid_with_a_bad_point_starts_nothing(ready, parent, tmp_path, text, field):
    run, _, snap = parent
    before = count_runs(ready)
    out = ready("runs", "sweep", run["runId"], "--snapshot", snap["snapshotId"], "--steps", "2",
                "--grid", grid_file(tmp_path, text))
    assert out.returncode != 0
    assert field in out.stderr, out.stderr
    assert count_runs(ready) == before
