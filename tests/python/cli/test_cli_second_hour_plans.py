"""A new user's second hour (issue 30), through the real `trainer` against a real trainerd: a
base model the engine cannot train is refused when it is selected and when a plan names it; every
error of a plan comes in one answer, each at its file:line:column, misspelt values with "did you
mean"; so does a misspelt key of trainerd's configuration; a broken dataset line is named by the
file's line and the column within it; a paused run's `runs get` shows its pause and how to resume;
a queued run shows its place in its pool's queue; `runs sweep` and `comparisons create` wait with
--wait; a sweep point that repeats an existing child exactly is refused without --force."""
from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from cli_support import (EXAMPLES, MODEL_NAME, Cli, cancel_run, count_runs, ended, grid_file, plan_text, prepare,
                         run_snapshots, start_run_id, start_trainerd, stop, wait_paused, wait_phase, wait_step)

SUPPORTED = "supported architectures: Qwen3ForCausalLM, Qwen2ForCausalLM, LlamaForCausalLM"


def make_gpt2_folder(dest):
    """A GPT-2 model folder as transformers writes it from a config: config.json naming
    GPT2LMHeadModel and its weights."""
    import transformers
    config = transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, n_positions=64, vocab_size=128)
    transformers.GPT2LMHeadModel(config).save_pretrained(dest)
    return dest


@pytest.fixture(scope="module")
def folders(tiny_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("models")
    swapped = root / "swapped"
    shutil.copytree(tiny_model, swapped)
    return {"gpt2": make_gpt2_folder(root / "gpt2-tiny"), "swapped": swapped}


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, folders, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)},
                                             {"name": "gpt2-tiny", "path": str(folders["gpt2"])},
                                             {"name": "swapped", "path": str(folders["swapped"])}]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def cli(bin_dir, trainerd) -> Cli:
    return prepare(Cli(bin_dir / "trainer", trainerd.url))


def test_selecting_a_base_model_of_an_unsupported_architecture_is_refused_by_name(cli, folders):
    out = cli("base-models", "select", "gpt2-tiny", "--wait")
    assert out.returncode != 0, out.stdout + out.stderr
    assert "base model 'gpt2-tiny' is a GPT2LMHeadModel" in out.stderr, out.stderr
    assert str(folders["gpt2"] / "config.json") in out.stderr, out.stderr
    assert "which the engine cannot train; " + SUPPORTED in out.stderr, out.stderr
    # Nothing was selected.
    assert "gpt2-tiny" not in [m["name"] for m in cli.json("base-models", "list")["baseModels"]]


def test_a_plan_naming_a_selected_model_whose_folder_is_no_longer_trainable_is_refused_at_dry_run(cli, folders):
    """A model selected before its folder changed (or by a trainerd without the check): the dry run
    refuses it by name instead of saying "Plan is valid" and failing when the job starts."""
    cli("base-models", "select", "swapped", "--wait", "--timeout", "2m", check=True)
    config = folders["swapped"] / "config.json"
    original = config.read_text()
    config.write_text(json.dumps({**json.loads(original), "architectures": ["GPT2LMHeadModel"]}))
    try:
        plan = "\n".join(["kind: run", "workload: cli-tests", "baseModel: swapped", "config:",
                          "  dataset: sentiment-train", "  hyperparams: {training: {maxSteps: 1, batchSize: 2}}",
                          "  maxSeqLength: 64", "execution: {gpus: 0}"]) + "\n"
        before = cli.json("runs", "list")["total"]
        out = cli("runs", "start", "-f", "-", "--dry-run", input=plan)
        assert out.returncode != 0, out.stdout + out.stderr
        assert "Plan is valid" not in out.stdout, out.stdout
        assert "stdin:3:1: baseModel: base model 'swapped' is a GPT2LMHeadModel" in out.stderr, out.stderr
        assert SUPPORTED in out.stderr, out.stderr
        assert cli("runs", "start", "-f", "-", "--force", input=plan).returncode != 0
        assert cli.json("runs", "list")["total"] == before
    finally:
        config.write_text(original)


# ---- every error of a plan at once --------------------------------------------------------------

BAD_RL_PLAN = """kind: run
workload: cli-tests
baseModel: tiny-qwen3
config:
  dataset: sentiment-train
  method: grpo
  maxSeqLength: 512
  hyperparams:
    lora: {rank: 0, alpha: 16}
  reward:
    terms:
      - kind: json-label-macth
  rlHyperparams:
    groupSize: 4
    lossAggregation: dapoo
    optimizer: {learningRate: 0.001, schedule: constnat}
    maxCompletionLen: 10
execution: {gpus: 0}
"""


def test_every_error_of_a_plan_comes_in_one_answer_each_at_its_line_and_column(cli, tmp_path):
    path = tmp_path / "rl.yaml"
    path.write_text(BAD_RL_PLAN)
    before = cli.json("runs", "list")["total"]
    out = cli("runs", "start", "-f", path, "--dry-run")
    assert out.returncode == 1, out.stdout + out.stderr
    err = out.stderr
    assert f"trainer: {path} has 5 errors; nothing was started:" in err, err
    expected = [
        f"  {path}:9:12: config.hyperparams.lora.rank: must be between 1 and",
        f"  {path}:12:9: config.reward.terms[0].kind: \"json-label-macth\" is not a reward term kind; "
        "did you mean json-label-match?",
        f"  {path}:15:5: config.rlHyperparams.lossAggregation: must be one of \"dapo\", \"bnpo\", \"grpo\", "
        "\"dr_grpo\", got \"dapoo\"; did you mean dapo?",
        f"  {path}:16:38: config.rlHyperparams.optimizer.schedule: must be one of \"linear\", \"cosine\", "
        "\"constant\", got \"constnat\"; did you mean constant?",
        f"  {path}:17:5: config.rlHyperparams.maxCompletionLen: unknown field; did you mean maxCompletionLength?",
    ]
    lines = err.splitlines()
    at = [next((i for i, line in enumerate(lines) if line.startswith(e)), None) for e in expected]
    assert None not in at, (expected, err)
    assert at == sorted(at), err  # in the order of the file
    assert "Plan is valid" not in out.stdout
    assert cli.json("runs", "list")["total"] == before


def test_more_than_twenty_errors_show_the_first_twenty_then_a_count(cli):
    keys = [f"x{i:02d}" for i in range(25)]
    plan = plan_text(1).replace("  maxSeqLength: 128\n", "  maxSeqLength: 128\n" + "".join(f"  {k}: 1\n" for k in keys))
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "trainer: stdin has 25 errors; nothing was started:" in out.stderr, out.stderr
    shown = [line for line in out.stderr.splitlines() if re.match(r"  stdin:\d+:3: config\.x\d\d: unknown field", line)]
    assert [line.split(": ")[1] for line in shown] == [f"config.{k}" for k in keys[:20]], out.stderr
    assert out.stderr.rstrip().endswith("... and 5 more (fix these and run it again)"), out.stderr


def test_one_error_stays_on_one_line(cli):
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan_text(1).replace("maxSteps: 1", "maxSteps: -1"))
    assert out.returncode == 1, out.stderr
    assert re.fullmatch(r"trainer: stdin:\d+:\d+: config\.hyperparams\.training\.maxSteps: [^\n]*\n", out.stderr), out.stderr


def test_a_misspelt_key_of_trainerds_configuration_gets_did_you_mean(bin_dir, tiny_model, tmp_path):
    config = tmp_path / "trainerd.json"
    config.write_text(json.dumps({"baseModels": [{"name": MODEL_NAME, "pth": str(tiny_model)}]}))
    out = subprocess.run([str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert "baseModels[0].pth: unknown field; did you mean path?" in out.stderr, out.stderr
    config.write_text(json.dumps({"baseModel": []}))
    out = subprocess.run([str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert "baseModel: unknown field; did you mean baseModels?" in out.stderr, out.stderr


# ---- a broken dataset line ----------------------------------------------------------------------

def test_a_broken_json_line_is_named_by_the_files_line_and_the_column_within_it(cli, tmp_path):
    good = {"messages": [{"role": "user", "content": "Great product"}, {"role": "assistant", "content": "positive"}]}
    lines = [json.dumps(good)] * 5 + ['{"messages": [{"role": "user", "content": "broken"}, '
                                      '{"role": "assistant", "content": "x",}]}']
    rows = tmp_path / "broken.jsonl"
    rows.write_text("\n".join(lines) + "\n")
    column = lines[5].index(",}") + 2  # the "}" after the trailing comma, counted from 1
    out = cli("datasets", "create", "-f", rows, "--name", "broken")
    assert out.returncode == 1, out.stdout + out.stderr
    assert f"line 6, column {column}: not valid JSON: " in out.stderr, out.stderr
    assert "line 1, column" not in out.stderr, out.stderr


# ---- a paused run's runs get --------------------------------------------------------------------

def test_a_paused_runs_get_shows_its_pause_and_how_to_resume_it(cli):
    run_id = start_run_id(cli, plan_text(100000, save_every=1000))
    short = run_id[:12]
    try:
        wait_step(cli, run_id, 1)
        cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
        paused = wait_paused(cli, run_id)
        step = paused["pause"]["savedStep"]
        text = cli("runs", "get", run_id, check=True).stdout
        section = text.split("\nPause\n", 1)
        assert len(section) == 2, text
        body = section[1]
        assert re.search(r"^  Checkpoint:\s+save \(a save at the next optimizer step, then stop\)$", body, re.M), text
        assert re.search(rf"^  Snapshot:\s+{paused['pause']['snapshotId'][:12]} \(step {step}\)$", body, re.M), text
        assert re.search(r"^  Devices:\s+released at \S+$", body, re.M), text
        assert re.search(rf"^  Next:\s+`trainer runs resume {short}` continues it from step {step} as a new attempt; "
                         rf"`trainer runs cancel {short}` ends it$", body, re.M), text
        # `runs pause --help` promises it.
        assert "runs get" in cli("runs", "pause", "--help", check=True).stdout
    finally:
        cancel_run(cli, run_id)


# ---- a queued run's place in its pool's queue ----------------------------------------------------

def test_a_queued_run_shows_its_place_in_its_pools_queue_and_the_claims_ahead(cli):
    """The deployment's one CPU device: the first run trains, the next two wait in pool cpu."""
    running = start_run_id(cli, plan_text(100000))
    queued = []
    try:
        wait_step(cli, running, 1)
        queued = [start_run_id(cli, plan_text(100000)) for _ in range(2)]
        second = wait_phase(cli, queued[1], "WAITING_FOR_DEVICES")
        first = wait_phase(cli, queued[0], "WAITING_FOR_DEVICES")
        assert first["claim"]["queuePosition"] == 1 and first["claim"]["ahead"] == [], first["claim"]
        assert second["claim"]["queuePosition"] == 2, second["claim"]
        assert [a["owner"] for a in second["claim"]["ahead"]] == [queued[0]], second["claim"]
        text = cli("runs", "get", queued[1], check=True).stdout
        assert re.search(rf"^  Queue:\s+2nd in queue, behind {queued[0][:12]} \(SFT, 1 device\)$", text, re.M), text
        assert re.search(r"^  Queue:\s+first in queue$", cli("runs", "get", queued[0], check=True).stdout, re.M)
        # The live line says it too (`runs wait` on a run that stays queued: its first line, then Ctrl-C).
        proc = subprocess.Popen([str(cli.binary), "runs", "wait", queued[1], "--timeout", "2s", "--trainer-url", cli.url],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate(timeout=60)
        assert f"waiting for devices in pool cpu  2nd in queue, behind {queued[0][:12]} (SFT, 1 device)" in out + err, \
            out + err
    finally:
        for run_id in [running, *queued]:
            cancel_run(cli, run_id, wait=False)
        for run_id in [running, *queued]:
            ended(cli, run_id)


# ---- runs sweep --wait, and a point that repeats an existing child ---------------------------------

@pytest.fixture(scope="module")
def parent(cli):
    """A completed run with a snapshot at step 2."""
    run = ended(cli, start_run_id(cli, plan_text(2, save_every=2)))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    snapshot = next(s for s in run_snapshots(cli, run["runId"]) if s["savedStep"] == 2)
    return run, snapshot


LR_GRID = "axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.001, 0.002]}\n"


def test_runs_sweep_wait_follows_every_child_to_its_end(cli, parent, tmp_path):
    run, snapshot = parent
    grid = grid_file(tmp_path, LR_GRID)
    out = cli("runs", "sweep", run["runId"], "--snapshot", snapshot["snapshotId"][:12], "--steps", "1", "--grid", grid,
              "--wait", "--exit-status", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    children = cli.json("runs", "branches", run["runId"])["branches"]
    sweep = [c for c in children if c.get("childKind") == "sweep"]
    assert len(sweep) == 2 and all(c["phase"] == "COMPLETED" for c in sweep), sweep
    for child in sweep:
        row = next((line for line in reversed(out.stdout.splitlines()) if child["runId"][:12] in line), None)
        assert row and "COMPLETED" in row and re.search(r"loss [0-9.]+", row), out.stdout
    assert re.search(r"^sweep: point 0 \(hyperparams\.optimizer\.learningRate=0\.001\), run [0-9a-f]{12}: COMPLETED "
                     r"\([12] of 2 ended\)$", out.stderr, re.M), out.stderr
    assert "(2 of 2 ended)" in out.stderr, out.stderr


def test_a_sweep_point_that_repeats_an_existing_child_is_refused_without_force(cli, parent, tmp_path):
    run, snapshot = parent
    grid = grid_file(tmp_path, "axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.004, 0.005]}\n")
    args = ["runs", "sweep", run["runId"], "--snapshot", snapshot["snapshotId"][:12], "--steps", "1", "--grid", grid]
    first = cli.json(*args)
    ids = [p["runId"] for p in first["points"]]
    for run_id in ids:
        ended(cli, run_id)
    before = count_runs(cli)
    out = cli(*args)
    assert out.returncode == 1, out.stdout + out.stderr
    assert (f"grid point 0 ({{\"hyperparams.optimizer.learningRate\":0.004}}) repeats run {ids[0]} exactly "
            "(the same snapshot, restore and settings); drop the point, or add --force to train it again") in out.stderr, \
        out.stderr
    assert count_runs(cli) == before  # nothing started
    # A dry run warns of each repeated point.
    dry = cli(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"Warning: point 1 (hyperparams.optimizer.learningRate=0.005) repeats run {ids[1][:12]} exactly" in dry.stderr, \
        dry.stderr
    # Another learning rate is no repeat; --force trains a repeat again.
    other = tmp_path / "other.yaml"
    other.write_text("axes:\n  - {path: hyperparams.optimizer.learningRate, values: [0.006]}\n")
    fresh = cli.json(*args[:-1], other)
    assert "repeats" not in fresh["points"][0]
    forced = cli(*args, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "repeats run" in forced.stderr and "trained again (--force)" in forced.stderr, forced.stderr
    for run_id in [fresh["points"][0]["runId"]] + [line.split()[2] for line in forced.stdout.splitlines()
                                                   if re.match(r"^\d+\s", line)]:
        cancel_run(cli, run_id, wait=False)


# ---- comparisons create --wait ---------------------------------------------------------------------

def test_comparisons_create_wait_follows_it_to_its_end_and_shows_it(cli, parent, tmp_path):
    run, snapshot = parent
    rows = tmp_path / "held-out.jsonl"
    rows.write_text("".join(line for line in (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines(True)[:3]))
    cli("datasets", "create", "-f", rows, "--name", "held-out-3", check=True)
    child = cli("runs", "branch", run["runId"], "--snapshot", snapshot["snapshotId"], "--steps", "1",
                "--overrides", "-", "--wait", "--exit-status", "--jq", ".runId",
                input="hyperparams: {optimizer: {learningRate: 0.0005}}\n", timeout=900)
    assert child.returncode == 0, child.stdout + child.stderr
    child_id = cli.json("runs", "branches", run["runId"])["branches"][0]["runId"]
    out = cli("comparisons", "create", "--source", snapshot["snapshotId"], "--branch", child_id, "--dataset",
              "held-out-3", "--max-new-tokens", "4", "--wait", "--exit-status", timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = [line for line in out.stderr.splitlines() if line.startswith("comparison ")]
    assert lines and all(re.match(r"comparison [0-9a-f]{12}: [A-Z]+, [0-2] of 2 targets ended$", line)
                                   for line in lines), out.stderr
    assert re.search(r"^comparison [0-9a-f]{12}: COMPLETED, 2 of 2 targets ended$", out.stderr, re.M), out.stderr
    # Then shown as `comparisons get` shows it.
    assert "TARGET" in out.stdout and "MEAN" in out.stdout, out.stdout
    last = cli.json("comparisons", "list")["comparisons"][0]
    assert last["phase"] == "COMPLETED"
