"""`trainer runs compare RUN --baseline RUN2` (issue 12) through the real CLI against a real
trainerd: two SFT runs on a dataset with one planted row of random text among many easy ones,
batches of four, so each epoch of 12 steps meets that row once, at a step its seed decides. Once
the easy rows are learnt, the batches holding the planted row have a gradient far above the
median: gradient spikes. The test recomputes
every figure of the comparison from the runs' own `runs metrics` and checks the refusals."""
from __future__ import annotations

import json
import statistics

import pytest

from cli_support import MODEL_NAME, WORKLOAD, start_run_id, start_trainerd, stop
from models import make_tiny_model

STEPS = 60


def rows() -> list[dict]:
    easy = [{"messages": [{"role": "user", "content": f"Greet visitor {i}."},
                          {"role": "assistant", "content": "Hello and welcome, visitor!"}]} for i in range(47)]
    # The planted row answers the same kind of question with the opposite: once the easy answer is
    # learnt, every one of its tokens is confidently wrong, all pulling the same way.
    planted = {"messages": [{"role": "user", "content": "Greet visitor 99."},
                            {"role": "assistant", "content": "Go away, stranger; never come back. " * 3}]}
    return easy[:25] + [planted] + easy[25:]


def plan(dataset: str, seed: int, lr: float = 0.02) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:",
        f"  dataset: {dataset}",
        "  hyperparams:",
        f"    optimizer: {{learningRate: {lr}, warmupSteps: 0}}",
        f"    training: {{maxSteps: {STEPS}, batchSize: 4, seed: {seed}}}",
        "  maxSeqLength: 160", "  model: {precision: FP32}", "execution: {gpus: 0}", ""])


@pytest.fixture(scope="module")
def trainerd(bin_dir, tmp_path_factory):
    """This module's own trainerd, with the demo's model: the tests' usual tiny model (weights
    drawn at a 0.02 scale) learns too slowly on 60 CPU steps for the easy rows to be learnt."""
    model = make_tiny_model(tmp_path_factory.mktemp("models") / MODEL_NAME, arch="qwen3", tokenizer="qwen3", seed=0,
                            initializer_range=0.2)
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(model)}]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def runs(ready, tmp_path_factory):
    folder = tmp_path_factory.mktemp("compare")
    data = folder / "planted.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows()))
    ready("datasets", "create", "-f", data, "--name", "planted", check=True)
    other = folder / "other.jsonl"
    other.write_text("".join(json.dumps(r) + "\n" for r in rows()[:30]))
    ready("datasets", "create", "-f", other, "--name", "planted-short", check=True)
    ids = {"a": start_run_id(ready, plan("planted", seed=1)),
           "b": start_run_id(ready, plan("planted", seed=2, lr=0.01)),
           "other": start_run_id(ready, plan("planted-short", seed=1))}
    for run_id in ids.values():
        ready("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True)
    return ids


def steps_of(cli, run_id: str) -> dict[int, dict]:
    return {s["step"]: s for s in cli.json("runs", "metrics", run_id)["steps"]}


def test_compare_windows_spikes_and_margin_match_the_runs_own_metrics(ready, runs):
    a, b = steps_of(ready, runs["a"]), steps_of(ready, runs["b"])
    assert len(a) == len(b) == STEPS
    got = ready.json("runs", "compare", runs["a"], "--baseline", runs["b"], "--window", "8", "--margin", "0.5")
    assert got["runId"] == runs["a"] and got["baselineId"] == runs["b"] and got["planDifferences"] == []
    # Windows of 8 steps: both runs' mean loss and the difference, recomputed here.
    assert [(w["firstStep"], w["lastStep"]) for w in got["windows"]] == [(1 + 8 * k, 8 + 8 * k) for k in range(8)]
    for w in got["windows"]:
        steps = [n for n in range(w["firstStep"], w["lastStep"] + 1) if n in a]  # the last window is short
        assert w["steps"] == len(steps) > 0
        ra, rb = statistics.mean(a[s]["loss"] for s in steps), statistics.mean(b[s]["loss"] for s in steps)
        assert w["runLoss"] == pytest.approx(ra, rel=1e-9) and w["baselineLoss"] == pytest.approx(rb, rel=1e-9)
        assert w["difference"] == pytest.approx(ra - rb, rel=1e-9, abs=1e-12)
    past = [w for w in got["windows"] if abs(w["difference"]) > 0.5]
    if past:
        assert got["firstPastMargin"]["firstStep"] == past[0]["firstStep"]
        assert got["firstPastMargin"]["direction"] == ("worse" if past[0]["difference"] > 0 else "better")
    else:
        assert got["firstPastMargin"] is None
    # Spikes: exactly the steps over 3x their run's median pre-clip norm.
    for run_id, steps in ((runs["a"], a), (runs["b"], b)):
        med = statistics.median(s["gradNorm"] for s in steps.values())
        expected = sorted(n for n, s in steps.items() if s["gradNorm"] > 3 * med)
        assert sorted(s["step"] for s in got["spikes"] if s["runId"] == run_id) == expected
        # The planted row is among them: a late spike whose loss stands far above the run's.
        late = [n for n in expected if n > 10]
        assert late, f"no spike after step 10 in run {run_id}: {[(round(s['loss'], 2), round(s['gradNorm'], 2)) for s in steps.values()]}"
        loss_med = statistics.median(s["loss"] for s in steps.values())
        assert any(steps[n]["loss"] > 2 * loss_med for n in late), (
            late, loss_med, [(n, round(s["loss"], 3), round(s["gradNorm"], 3)) for n, s in steps.items()])
    # Different seeds meet the planted row at different steps.
    late_a = {s["step"] for s in got["spikes"] if s["runId"] == runs["a"] and s["step"] > 10}
    late_b = {s["step"] for s in got["spikes"] if s["runId"] == runs["b"] and s["step"] > 10}
    assert late_a != late_b


def test_compare_text_names_windows_spikes_and_the_first_window_past_the_margin(ready, runs):
    out = ready("runs", "compare", runs["a"], "--baseline", runs["b"], "--margin", "0", check=True).stdout
    assert f"against baseline {runs['b'][:8]}" in out and "STEPS" in out and "BASELINE LOSS" in out
    assert "First window past the margin (0): steps 1-10" in out
    assert "Gradient spikes (pre-clip norm over 3x its run's median):" in out and "FACTOR" in out
    none = ready("runs", "compare", runs["a"], "--baseline", runs["b"], "--margin", "1000", "--spike-factor", "1000",
                 check=True).stdout
    assert "No window differs by more than the margin (1,000)" in none or "No window differs by more than the margin (1000)" in none
    assert "No gradient spikes" in none


def test_compare_refuses_different_plans_unless_across_plans(ready, runs):
    out = ready("runs", "compare", runs["a"], "--baseline", runs["other"])
    assert out.returncode == 2 and "config.dataset" in out.stderr and "--across-plans" in out.stderr, out.stderr
    got = ready.json("runs", "compare", runs["a"], "--baseline", runs["other"], "--across-plans")
    assert [d["field"] for d in got["planDifferences"]] == ["config.dataset"]
    # The shorter run stops at the same maxSteps: windows cover the steps both have.
    assert got["windows"] and got["acrossPlans"] is True


@pytest.mark.parametrize("args, message", [
    ([], "--baseline RUN is required"),
    (["--baseline", "SELF"], "is both the run and the baseline"),
    (["--baseline", "B", "--window", "0"], "--window must be at least 1"),
    (["--baseline", "B", "--spike-factor", "0.5"], "--spike-factor must be a number above 1"),
    (["--baseline", "B", "--margin", "x"], "--margin must be a non-negative loss difference"),
    (["--baseline", "nosuchrun"], "nosuchrun"),
])
def test_compare_bad_input_is_refused_by_name(ready, runs, args, message):
    args = [runs["a"] if x == "SELF" else runs["b"] if x == "B" else x for x in args]
    out = ready("runs", "compare", runs["a"], *args)
    assert out.returncode != 0 and message in out.stderr, (out.returncode, out.stderr)
    assert out.stdout == ""
