"""The plan's smoke check end to end, through the real `trainer` CLI against a real trainerd
running the real job (docs/plans.md, "Smoke checks"): a plan whose loss cannot stay finite fails
its check before it trains a step, and `runs wait --exit-status` says so; a sound plan passes it
and then trains exactly as without it; bad smoke settings are refused by name."""
from __future__ import annotations

import json

import pytest

from cli_support import (adapter_bytes, count_runs, get_run, losses, plan_text, run_snapshots, start_run,
                         start_run_id)

STEPS = 6
# Weight decay 1000 at learning rate 1 multiplies every adapter weight by -999 at each step: the
# activations overflow within a few steps and the loss is no longer a number.
DIVERGING = "{learningRate: 1.0, weightDecay: 1000, schedule: constant}"


def test_a_plan_whose_loss_diverges_fails_its_smoke_check_before_training(ready):
    run_id = start_run_id(ready, plan_text(20, optimizer=DIVERGING, smoke="{steps: 8, rows: 8}"))
    waited = ready("runs", "wait", run_id, "--exit-status", "--timeout", "15m", timeout=1000)
    assert waited.returncode == 3, waited.stdout + waited.stderr
    run = get_run(ready, run_id)
    assert run["phase"] == "FAILED", run
    smoke = run["smoke"]
    assert (smoke["verdict"], smoke["passed"], smoke["check"], smoke["rows"]) == ("failed", False, "loss", 8), smoke
    assert "not finite" in smoke["reason"], smoke
    assert run["failureReason"].startswith("smoke check failed (loss): step "), run["failureReason"]
    # Nothing of the run itself was trained, saved or retried.
    assert run["progress"]["step"] == 0 and run["attempt"] == 1, run
    assert ready.json("runs", "metrics", run_id)["steps"] == []
    assert run_snapshots(ready, run_id) == []
    shown = ready("runs", "get", run_id, check=True).stdout
    assert "Smoke check" in shown and "failed (8 steps on 8 rows" in shown and ": loss: step " in shown, shown
    # The terminal event of a streamed wait carries the verdict.
    lines = ready("runs", "wait", run_id, "-o", "json-compact", check=True).stdout.splitlines()
    streamed = [json.loads(line) for line in lines[:-1]]  # the events, the terminal one, then the record
    terminal = next(e for e in streamed if e.get("type") == "terminal")
    assert terminal["smoke"]["verdict"] == "failed" and terminal["failureReason"] == run["failureReason"], terminal
    smoke_events = [e for e in streamed if e.get("type") == "smoke"]
    assert len(smoke_events) == 1 and smoke_events[0]["check"] == "loss", smoke_events


def test_the_same_plan_without_a_smoke_check_trains_on_numbers_that_are_not_finite(ready):
    """What the check above caught: unchecked, the run spends its steps on a loss that is not a number."""
    run = start_run(ready, plan_text(8, optimizer=DIVERGING), "--wait")
    assert "smoke" not in run
    assert any(loss is None for loss in losses(ready, run["runId"]).values()), losses(ready, run["runId"])


def test_a_sound_plan_passes_its_smoke_check_and_trains_exactly_as_without_it(ready):
    reference = start_run(ready, plan_text(STEPS, save_every=3), "--wait")
    assert reference["phase"] == "COMPLETED", reference.get("failureReason")
    run_id = start_run_id(ready, plan_text(STEPS, save_every=3, smoke="{steps: 3, rows: 8}"))
    assert get_run(ready, run_id)["smoke"] == {"verdict": "pending", "steps": 3, "rows": 8}
    waited = ready("runs", "wait", run_id, "--exit-status", "--timeout", "15m", timeout=1000)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    run = get_run(ready, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    smoke = run["smoke"]
    assert (smoke["verdict"], smoke["passed"], smoke["steps"], smoke["rows"]) == ("passed", True, 3, 8), smoke
    assert "check" not in smoke and "reason" not in smoke, smoke
    # The last step trained again from the restored checkpoint gives the same loss (fp32 on the CPU).
    assert smoke["restoredLoss"] == smoke["loss"], smoke
    assert losses(ready, run_id) == losses(ready, reference["runId"])
    assert adapter_bytes(run) == adapter_bytes(reference)
    # The check published nothing: the run's snapshots are the training's own.
    assert sorted(s["savedStep"] for s in run_snapshots(ready, run_id)) == [3, 6]
    shown = ready("runs", "get", run_id, check=True).stdout
    assert "Smoke check" in shown and "passed (3 steps on 8 rows" in shown, shown
    assert get_run(ready, run_id)["plan"]["smoke"] == {"steps": 3, "rows": 8}


@pytest.mark.parametrize("smoke, error", [
    ("{steps: 1}", "smoke.steps: must be between 2 and 100, got 1"),
    ("{steps: 101}", "smoke.steps: must be between 2 and 100, got 101"),
    ("{rows: 0}", "smoke.rows: must be between 1 and 10000, got 0"),
    ("{steps: 2.5}", "smoke.steps: must be an integer"),
    ("{step: 3}", "smoke.step: unknown field; did you mean steps?"),
    ("yes", 'smoke: must be an object {steps, rows} or true, got "yes"'),
])
def test_bad_smoke_settings_are_refused_by_name_and_start_nothing(ready, smoke, error):
    before = count_runs(ready)
    for flags in (["--dry-run"], ["--force"]):
        out = ready("runs", "start", "-f", "-", *flags, input=plan_text(STEPS, smoke=smoke))
        assert out.returncode != 0 and error in out.stderr, (flags, out.stdout + out.stderr)
    assert count_runs(ready) == before


def test_smoke_true_takes_the_defaults(ready):
    out = ready("runs", "start", "-f", "-", "--dry-run", "--show-resolved", "-o", "json", input=plan_text(STEPS, smoke="true"))
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["plan"]["smoke"] == {"steps": 4, "rows": 16}
