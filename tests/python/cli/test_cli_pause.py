"""Pause and resume end to end, through the real `trainer` CLI against a real trainerd running
the real job: a run paused (each policy) and resumed trains the same losses at every step, and
the same final adapter, as the same run uninterrupted (bit-exact in fp32 on the CPU); a job or a
trainerd killed with SIGKILL at chosen points loses nothing and does nothing twice."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import subprocess
import time

import pytest

from cli_support import DATASET_NAME, EXAMPLES, MODEL_NAME, WORKLOAD, Cli, start_trainerd, stop, wait_for

STEPS = 24
SAVE_EVERY = 4


def plan(max_steps: int = STEPS, save_every: int | None = SAVE_EVERY) -> str:
    execution = "{gpus: 0" + (f", saveEvery: {save_every}, keepAdapters: 100" if save_every else "") + "}"
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL_NAME}", "config:",
        f"  dataset: {DATASET_NAME}", "  hyperparams:", "    optimizer: {learningRate: 0.003}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4}}", "  maxSeqLength: 128",
        "  model: {precision: FP32}", f"execution: {execution}"]) + "\n"


def start(cli, text: str, *flags) -> dict:
    """Starts the plan; with "--wait", follows the run to its end and returns its final record."""
    wait = "--wait" in flags
    out = cli("runs", "start", "-f", "-", "--force", "-o", "json", *[f for f in flags if f != "--wait"], input=text)
    assert out.returncode == 0, out.stderr
    run = json.loads(out.stdout)
    if not wait:
        return run
    cli("runs", "wait", run["runId"], "--timeout", "15m", timeout=1000)
    return cli.json("runs", "get", run["runId"])


def get(cli, run_id) -> dict:
    return cli.json("runs", "get", run_id)


def losses(cli, run_id) -> dict[int, float]:
    steps = cli.json("runs", "metrics", run_id)["steps"]
    return {s["step"]: s["loss"] for s in steps}


def adapter_bytes(data_dir: pathlib.Path, run: dict) -> bytes:
    return (pathlib.Path(run["adapterPath"]) / "adapter_model.safetensors").read_bytes()


def paused(cli, run_id) -> dict | None:
    run = get(cli, run_id)
    return run if run["phase"] == "PAUSED" and run["pause"]["resourcesReleased"] else None


def job_pids(run_id: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"trainer-job run .*{run_id}"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


@pytest.fixture(scope="module")
def reference(ready):
    """The uninterrupted run every paused one is compared with."""
    run = start(ready, plan(), "--wait")
    assert run["phase"] == "COMPLETED", run
    return run, losses(ready, run["runId"])


def test_a_run_paused_with_save_and_resumed_trains_exactly_as_uninterrupted(ready, trainerd, reference):
    ref_run, ref_losses = reference
    run_id = start(ready, plan())["runId"]
    wait_for(lambda: get(ready, run_id)["progress"].get("step", 0) >= 5, what="step 5")
    out = ready("runs", "pause", run_id, "--checkpoint", "save")
    assert out.returncode == 0 and "Pause accepted" in out.stdout, out.stderr
    assert get(ready, run_id)["phase"] in ("PAUSING", "PAUSED")
    run = wait_for(lambda: paused(ready, run_id), what="PAUSED with resources released")
    pause = run["pause"]
    assert pause["policy"] == "save" and pause["state"] == "paused", pause
    saved = pause["savedStep"]
    assert 5 <= saved < STEPS
    assert not run.get("claim")
    assert not job_pids(run_id)
    # The pause's snapshot holds both kinds and is the run's restorable state.
    snap = ready.json("snapshots", "get", pause["snapshotId"][:12])
    assert sorted(snap["artifacts"]) == ["trainingState", "weights"] and snap["savedStep"] == saved
    assert run["savedStep"] == saved

    out = ready("runs", "resume", run_id)
    assert out.returncode == 0 and "attempt 2" in out.stdout, out.stdout + out.stderr
    again = ready("runs", "resume", run_id)  # a repeated resume has its effect once
    assert get(ready, run_id)["attempt"] == 2, again.stdout + again.stderr
    done = wait_for(lambda: (r := get(ready, run_id))["phase"] in ("COMPLETED", "FAILED") and r, what="the end")
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["attempt"] == 2
    assert losses(ready, run_id) == ref_losses  # every step, bit for bit
    assert adapter_bytes(trainerd.data_dir, done) == adapter_bytes(trainerd.data_dir, ref_run)
    assert done["cost"]["gpuSeconds"] > 0


def test_a_run_paused_against_the_latest_snapshot_resumes_from_it_exactly(ready, trainerd, reference):
    ref_run, ref_losses = reference
    run_id = start(ready, plan())["runId"]
    wait_for(lambda: get(ready, run_id).get("savedStep", 0) >= SAVE_EVERY, what="a committed training state")
    out = ready("runs", "pause", run_id, "--checkpoint", "latest")
    assert out.returncode == 0, out.stderr
    run = wait_for(lambda: paused(ready, run_id), what="PAUSED")
    assert run["pause"]["policy"] == "latest" and run["pause"]["savedStep"] % SAVE_EVERY == 0
    ready("runs", "resume", run_id, check=True)
    done = wait_for(lambda: (r := get(ready, run_id))["phase"] in ("COMPLETED", "FAILED") and r, what="the end")
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert losses(ready, run_id) == ref_losses
    assert adapter_bytes(trainerd.data_dir, done) == adapter_bytes(trainerd.data_dir, ref_run)


def test_a_job_killed_while_saving_for_a_pause_leaves_no_half_snapshot(ready, trainerd, reference):
    """SIGKILL of the job right after the pause is accepted (its save and publication in
    flight): the pause records the failed save, never a success; the run pauses against its last
    committed snapshot; the catalog lists only whole snapshots; resuming matches the reference."""
    _, ref_losses = reference
    run_id = start(ready, plan())["runId"]
    wait_for(lambda: get(ready, run_id).get("savedStep", 0) >= SAVE_EVERY, what="a committed training state")
    ready("runs", "pause", run_id, "--checkpoint", "save", check=True)
    for pid in job_pids(run_id):
        os.kill(pid, signal.SIGKILL)
    run = wait_for(lambda: paused(ready, run_id), what="PAUSED after the failed save")
    pause = run["pause"]
    assert pause["state"] == "pausedAfterFailedSave" and "save failed" in pause["failureReason"], pause
    listed = ready.json("runs", "snapshots", run_id)["snapshots"]
    for s in listed:  # whole snapshots only, each verified by its manifest
        kind = s["kinds"]["weights"]
        assert (trainerd.data_dir / kind["location"] / "manifest.json").exists()
    assert pause["snapshotId"] in [s["snapshotId"] for s in listed]
    ready("runs", "resume", run_id, check=True)
    done = wait_for(lambda: (r := get(ready, run_id))["phase"] in ("COMPLETED", "FAILED") and r, what="the end")
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert losses(ready, run_id) == ref_losses
    ids = [s["snapshotId"] for s in ready.json("runs", "snapshots", run_id, "--limit", "100")["snapshots"]]
    assert len(ids) == len(set(ids))  # nothing committed twice


def test_trainerd_killed_during_a_pause_finishes_it_after_restart(bin_dir, tiny_model, tmp_path):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    service = start_trainerd(bin_dir, tmp_path / "svc", config)
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET_NAME, check=True)
        cli("workloads", "create", WORKLOAD, check=True)
        run_id = start(cli, plan())["runId"]
        wait_for(lambda: get(cli, run_id)["progress"].get("step", 0) >= 3, what="step 3")
        cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
        port = int(service.url.rsplit(":", 1)[1])
        os.kill(service.proc.pid, signal.SIGKILL)  # the job saves and calls back a trainerd that is gone
        service.proc.wait(timeout=10)
        time.sleep(2.0)
        service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
        run = wait_for(lambda: paused(cli, run_id), what="PAUSED after the restart")
        assert run["pause"]["state"] == "paused", run["pause"]
        snap = cli.json("snapshots", "get", run["pause"]["snapshotId"])
        assert sorted(snap["artifacts"]) == ["trainingState", "weights"]
        cli("runs", "resume", run_id, check=True)
        done = wait_for(lambda: (r := get(cli, run_id))["phase"] in ("COMPLETED", "FAILED") and r, what="the end")
        assert done["phase"] == "COMPLETED", done.get("failureReason")
        assert sorted(losses(cli, run_id)) == list(range(1, STEPS + 1))
    finally:
        stop(service.proc, service.data_dir)
