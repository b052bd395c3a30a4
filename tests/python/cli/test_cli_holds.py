"""Holds and retention end to end, through the real `trainer` CLI against a real trainerd running the
real job (docs/lineage.md, "Holds and retention"): retention keeps execution.keepAdapters weights
and execution.keepTrainingStates training states of a run and deletes older artifacts from
storage, but never a held one: an operator pin, or the hold of a running branch. Pins are
idempotent; unpinning an unpinned snapshot says so; `snapshots release` drops the hold of a branch
that has ended."""
from __future__ import annotations

import json
import pathlib
import urllib.request

import pytest

from cli_support import ended, plan_text, run_snapshots, start_run_id, wait_paused, wait_phase, wait_step

STEPS = 30


def plan() -> str:
    return plan_text(STEPS, save_every=2, keep_adapters=1, keep_training_states=1)


def stored(data_dir: pathlib.Path, snap: dict, kind: str) -> bool:
    return (data_dir / snap["kinds"][kind]["location"] / "manifest.json").exists()


@pytest.mark.timeout(1200)  # its run is waited for up to 900 s
def test_retention_never_deletes_a_pinned_or_branch_held_snapshot(ready, trainerd):
    data = trainerd.data_dir
    run_id = start_run_id(ready, plan())
    wait_step(ready, run_id, 3)
    ready("runs", "pause", run_id, "--checkpoint", "save", check=True)
    paused = wait_paused(ready, run_id)
    held = paused["pause"]["snapshotId"]
    saved = paused["pause"]["savedStep"]

    # Pins are idempotent and all-or-nothing over both kinds by default.
    first = ready("snapshots", "pin", held[:12], check=True)
    assert "Pinned weights and trainingState" in first.stdout, first.stdout
    again = ready("snapshots", "pin", held[:12], "-o", "json", check=True)
    assert json.loads(again.stdout)["changed"] is False
    assert "already pinned" in ready("snapshots", "pin", held, check=True).stdout
    holds = ready.json("snapshots", "get", held)["heldBy"]
    assert [(h["holder"], sorted(h["artifacts"])) for h in holds] == [("pin", ["trainingState", "weights"])]

    # The run trains to its end: every later save sweeps older artifacts, but not the pinned ones.
    ready("runs", "resume", run_id, check=True)
    done = ended(ready, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    snaps = run_snapshots(ready, run_id)
    assert [s["savedStep"] for s in snaps] == [STEPS, saved], snaps  # the final one and the pinned one
    pinned = next(s for s in snaps if s["snapshotId"] == held)
    assert sorted(pinned["artifacts"]) == ["trainingState", "weights"]
    assert stored(data, pinned, "weights") and stored(data, pinned, "trainingState")
    swept = [p for p in (data / "snapshots").iterdir() if p.name not in {s["snapshotId"] for s in snaps}]
    assert swept == [], "retention left artifacts of unlisted snapshots behind"

    # A running branch holds the kinds it restores: unpinned, the weights stay, the rest goes.
    out = ready("runs", "branch", run_id, "--snapshot", held, "--steps", "2000", "-o", "json")
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout)["runId"]
    try:
        holders = {h["holder"]: h for h in ready.json("snapshots", "get", held)["heldBy"]}
        assert holders["branch"]["runId"] == child and holders["branch"]["artifacts"] == ["weights"]
        out = ready("snapshots", "unpin", held, check=True)
        assert "Unpinned weights and trainingState" in out.stdout, out.stdout
        snap = ready.json("snapshots", "get", held)
        assert snap["artifacts"] == ["weights"] and snap["kinds"]["trainingState"]["state"] == "deleted", snap
        assert stored(data, snap, "weights") and not stored(data, snap, "trainingState")
        again = ready("snapshots", "unpin", held, check=True)
        assert "is not pinned" in again.stdout, again.stdout
        # Its training state is gone: a trainingState branch from it is refused, saying why.
        out = ready("runs", "branch", run_id, "--snapshot", held, "--steps", "2", "--restore", "trainingState")
        assert out.returncode != 0 and "deleted by retention" in out.stderr, out.stderr
        out = ready("snapshots", "release", held, check=True)
        assert "still held by branch " + child in out.stdout, out.stdout
        assert stored(data, snap, "weights")
    finally:
        ready("runs", "cancel", child, "--force", check=True)
    wait_phase(ready, child, "CANCELLED")  # the branch ended
    assert ready.json("snapshots", "get", held)["heldBy"] == []  # an ended branch gives its source back
    ready("snapshots", "release", held, check=True)  # retention applies again: nothing holds it now
    assert ready("snapshots", "get", held).returncode != 0
    assert not stored(data, snap, "weights")
    assert [s["savedStep"] for s in run_snapshots(ready, run_id)] == [STEPS]

    # Each is a service operation in /metrics: the branch, the holds changed, the deletions.
    metrics = urllib.request.urlopen(trainerd.url + "/metrics", timeout=10).read().decode()
    for operation, stage in (("branch", "start_child"), ("hold_snapshot", "retain"), ("delete_snapshot", "delete")):
        assert any(f'akka_optimize_training_service_operation="{operation}"' in line
                   and f'akka_optimize_training_service_stage="{stage}"' in line
                   and 'akka_optimize_training_service_outcome="success"' in line
                   for line in metrics.splitlines()), operation
