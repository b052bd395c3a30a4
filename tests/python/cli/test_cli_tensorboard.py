"""TensorBoard event files end to end (docs/tensorboard.md), through the real `trainer` CLI
against a real trainerd running the real job, read back by TensorBoard's own reader
(tensorboard.backend.event_processing.event_accumulator, and tbparse) and served by a real `tensorboard`:
every step's loss equals `runs metrics`, in order, across a pause and a resume; a torn or
corrupted last record is skipped as TensorBoard skips its own; `runs tensorboard --sync-only`
mirrors the files while the run trains and exits when it ends; without it TensorBoard answers
on the port with the run's loss."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request

import numpy as np
import pytest
from tensorboard.backend.event_processing import event_accumulator
from tbparse import SummaryReader
from tensorboard.plugins.hparams import plugin_data_pb2

from cli_support import ended, free_port, plan_text, start_run_id, wait_for, wait_phase, wait_step

STEPS = 16
SAVE_EVERY = 4
VENV_BIN = pathlib.Path(sys.executable).parent  # where the pinned `tensorboard` is installed


def plan() -> str:
    return plan_text(STEPS, save_every=SAVE_EVERY)


def metric_losses(cli, run_id) -> list[tuple[int, float]]:
    return [(s["step"], s["loss"]) for s in cli.json("runs", "metrics", run_id)["steps"]]


def accumulator(path: pathlib.Path) -> event_accumulator.EventAccumulator:
    """TensorBoard's own reader over a folder (or one file), everything kept."""
    acc = event_accumulator.EventAccumulator(str(path), size_guidance={event_accumulator.SCALARS: 0,
                                                                       event_accumulator.TENSORS: 0})
    acc.Reload()
    return acc


def board_losses(path: pathlib.Path) -> list[tuple[int, float]]:
    if not path.exists():
        return []
    acc = accumulator(path)
    if "train/loss" not in acc.Tags()["scalars"]:
        return []
    return [(e.step, e.value) for e in acc.Scalars("train/loss")]


def as_float32(losses: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """The losses as an event file holds them (Summary.Value.simple_value is a float)."""
    return [(step, float(np.float32(loss))) for step, loss in losses]


def sync_only(cli, run_id: str, folder: pathlib.Path) -> subprocess.Popen:
    argv = [str(cli.binary), "runs", "tensorboard", run_id, "--dir", str(folder), "--sync-only",
            "--trainer-url", cli.url]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


@pytest.fixture(scope="module")
def paused_run(ready, tmp_path_factory):
    """A run paused (with a save) after step 5 and resumed to its end, its event files mirrored by
    `runs tensorboard --sync-only` started right after the submission: (run id, mirror folder,
    what the mirror held while the run was PAUSED, the process's output)."""
    folder = tmp_path_factory.mktemp("tb")
    run_id = start_run_id(ready, plan())
    short = run_id[:12]
    mirror = sync_only(ready, run_id, folder)
    try:
        wait_step(ready, run_id, 5)
        ready("runs", "pause", run_id, "--checkpoint", "save", check=True)
        run = wait_phase(ready, run_id, "PAUSED")
        saved = run["pause"]["savedStep"]
        # The job copied its file before it reported the pause: the mirror catches up to it.
        while_paused = wait_for(lambda: (b := board_losses(folder / short)) and b[-1][0] == saved and b,
                                what=f"the mirror to reach step {saved}")
        assert mirror.poll() is None, "--sync-only must keep syncing while the run is not over"
        ready("runs", "resume", run_id, check=True)
        done = ended(ready, run_id)
        assert done["phase"] == "COMPLETED", done.get("failureReason")
        stdout, stderr = mirror.communicate(timeout=120)  # it exits by itself once the run ended
        assert mirror.returncode == 0, stderr
    finally:
        if mirror.poll() is None:
            mirror.kill()
            mirror.wait()
    return run_id, folder / short, while_paused, saved, stdout


def test_the_event_files_hold_every_steps_loss_as_runs_metrics_across_a_pause_and_resume(ready, paused_run):
    run_id, folder, while_paused, saved, stdout = paused_run
    files = sorted(p.name for p in folder.iterdir())
    assert len(files) == 2 and all(f.startswith("events.out.tfevents.") for f in files), files  # one per attempt
    expected = as_float32(metric_losses(ready, run_id))
    assert [s for s, _ in expected] == list(range(1, STEPS + 1))
    assert board_losses(folder) == expected  # every step, in order, equal to `runs metrics`
    scalars = SummaryReader(str(folder)).scalars  # and as tbparse reads them
    loss = scalars[scalars.tag == "train/loss"].sort_values("step")
    assert [(int(s), float(np.float32(v))) for s, v in zip(loss.step, loss.value)] == expected
    # While paused the mirror held the first attempt's steps exactly.
    assert while_paused == expected[:saved]
    assert f"Run {run_id[:12]}" in stdout and "the run has ended" in stdout, stdout


def test_the_event_files_carry_the_steps_scalars_and_the_plan_as_hyperparameters(ready, paused_run):
    run_id, folder, *_ = paused_run
    acc = accumulator(folder)
    scalars = set(acc.Tags()["scalars"])
    assert {"train/loss", "train/learning_rate", "train/grad_norm", "train/tokens_per_second"} <= scalars, scalars
    metrics = ready.json("runs", "metrics", run_id)["steps"]
    lrs = [(e.step, e.value) for e in acc.Scalars("train/learning_rate")]
    assert lrs == [(s["step"], float(np.float32(s["learningRate"]))) for s in metrics]
    contents = acc.PluginTagToContent("hparams")
    assert "_hparams_/session_start_info" in contents, contents
    data = plugin_data_pb2.HParamsPluginData.FromString(contents["_hparams_/session_start_info"])
    hparams = data.session_start_info.hparams
    assert hparams["config.hyperparams.training.maxSteps"].number_value == STEPS
    assert hparams["config.hyperparams.optimizer.learningRate"].number_value == pytest.approx(0.003)
    assert data.session_start_info.group_name == run_id


def test_trainerd_lists_and_serves_the_files_it_holds(ready, paused_run, trainerd):
    run_id, folder, *_ = paused_run
    with urllib.request.urlopen(f"{trainerd.url}/v1/runs/{run_id[:12]}/tensorboard", timeout=30) as r:
        listing = json.load(r)
    assert listing["runId"] == run_id and listing["ended"] is True and listing["phase"] == "COMPLETED"
    assert [(f["name"], f["bytes"]) for f in listing["files"]] == \
        sorted((p.name, p.stat().st_size) for p in folder.iterdir())
    name = listing["files"][0]["name"]
    with urllib.request.urlopen(f"{trainerd.url}/v1/runs/{run_id}/tensorboard/{name}", timeout=30) as r:
        assert r.read() == (folder / name).read_bytes()
    for bad, code in ((name[:-1] + "x", 404), ("state.db", 400)):
        try:
            urllib.request.urlopen(f"{trainerd.url}/v1/runs/{run_id}/tensorboard/{bad}", timeout=30)
            raise AssertionError(f"{bad} was served")
        except urllib.error.HTTPError as e:
            assert e.code == code, (bad, e.code)
            assert json.load(e)["error"]["field"] == "file"


@pytest.mark.parametrize("damage", ["torn", "corrupted"])
def test_a_damaged_last_record_is_skipped_by_tensorboards_reader(paused_run, tmp_path, damage):
    """A copy caught mid-write ends in a torn record; a corrupted one fails its data CRC. Either
    way TensorBoard reads every whole record before it, as it does its own files."""
    _, folder, *_ = paused_run
    last = sorted(folder.iterdir())[-1]
    whole = board_losses(last)
    data = bytearray(last.read_bytes())
    if damage == "torn":
        del data[-7:]  # the last record loses its data's end and its CRC
    else:
        data[-6] ^= 0xFF  # a byte of the last record's data: its masked CRC-32C no longer matches
    copy = tmp_path / last.name
    copy.write_bytes(bytes(data))
    assert board_losses(copy) == whole[:-1]


def test_runs_tensorboard_starts_tensorboard_which_serves_the_runs_loss(ready, paused_run, tmp_path):
    run_id, folder, *_ = paused_run
    port = free_port()
    env = {**os.environ, "PATH": f"{VENV_BIN}:{os.environ.get('PATH', '')}"}
    env.pop("TRAINER_URL", None)
    proc = subprocess.Popen([str(ready.binary), "runs", "tensorboard", run_id, "--dir", str(tmp_path),
                             "--port", str(port), "--trainer-url", ready.url],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
                            stdin=subprocess.DEVNULL)
    try:
        query = urllib.parse.urlencode({"run": run_id[:12], "tag": "train/loss"})
        url = f"http://127.0.0.1:{port}/data/plugin/scalars/scalars?{query}"

        def scalars():
            assert proc.poll() is None, proc.communicate()
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return json.load(r) or None
            except (urllib.error.URLError, ConnectionError):
                return None
        served = wait_for(scalars, timeout=180, interval=1.0, what="TensorBoard's scalars API")
        assert [(step, value) for _, step, value in served] == as_float32(metric_losses(ready, run_id))
    finally:
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert f"http://localhost:{port}/" in stdout, stdout
    # TensorBoard went with it: nothing answers on the port any more.
    with pytest.raises((urllib.error.URLError, ConnectionError)):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=5)


def test_runs_tensorboard_without_tensorboard_on_path_says_what_to_do(ready, paused_run, tmp_path):
    run_id, *_ = paused_run
    bare = tmp_path / "bin"
    bare.mkdir()
    out = ready("runs", "tensorboard", run_id, "--dir", tmp_path / "tb", env={"PATH": str(bare)})
    assert out.returncode == 1
    assert "tensorboard is not on PATH" in out.stderr and "--sync-only" in out.stderr, out.stderr
    assert not (tmp_path / "tb").exists()  # nothing made
