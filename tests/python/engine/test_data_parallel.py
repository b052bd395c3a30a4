"""Data-parallel SFT through `trainer-job run` (docs/data-parallel.md): a plan with execution.gpus N
trains on N ranks (Gloo on the CPU here), each taking its share of every global batch. The global
batch and schedule are a single-device run's, so N ranks give the same losses and the same final
adapter as one, within float summation order. A rank killed with SIGKILL fails the job, which
names it, and the other ranks are killed."""
import json
import os
import pathlib
import signal
import subprocess
import time

import pytest
from safetensors.torch import load_file

from engine_helpers import write_jsonl
from test_sft import plan_for, task_rows

# Float32 sums in another order (per rank, then over the ranks): the same to a few ulps a step.
LOSS_RTOL = 2e-5
# Adam divides by the root of the second moment, so an element whose gradient is near zero moves
# by up to the learning rate (0.02 here) on a difference of ulps: 1e-4 is 0.5% of one step.
ADAPTER_ATOL = 1e-4


def run_job(job, tmp, name, plan):
    plan_path = tmp / f"{name}.json"
    plan_path.write_text(json.dumps(plan))
    out = tmp / name
    events_path = tmp / f"{name}.events"
    proc = job("run", "--plan", plan_path, "--output", out, "--events", events_path, check=False)
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert proc.returncode == 0, proc.stderr + "\n" + "\n".join(map(str, events[-3:]))
    return out, events, proc.stderr


def of_type(events, kind):
    return [e for e in events if e["type"] == kind]


def dp_plan(model, data, gpus, **training):
    plan = plan_for(model, data, **{"maxSteps": 6, "validationFrequencySteps": 3, **training})
    plan["config"]["hyperparams"]["lora"]["dropout"] = 0.0  # each rank would draw its own masks
    plan["execution"] = {"gpus": gpus, "saveEvery": 3}
    return plan


@pytest.mark.parametrize("training", [
    # Two micro-batches of four sequences per step: each rank takes two of each.
    {"batchSize": 4, "gradientAccumulation": 2},
    # Three packed sequences per step: the ranks' shares differ (one and two), so the loss must be
    # normalised by the whole step's token count, not each rank's.
    {"batchSize": 3, "gradientAccumulation": 1, "packing": True},
], ids=["even-shares", "uneven-packed"])
def test_two_ranks_train_as_one_device_with_the_same_global_batch(tiny_models, job, tmp_path, training):
    model = tiny_models("qwen3", sharp=True)
    data = write_jsonl(tmp_path / "train.jsonl", task_rows(40))
    one_out, one, _ = run_job(job, tmp_path, "one", dp_plan(model, data, 0, **training))
    two_out, two, stderr = run_job(job, tmp_path, "two", dp_plan(model, data, 2, **training))

    assert "data parallel over 2 ranks" in stderr
    assert [d["kind"] for d in of_type(two, "devices")[0]["devices"]] == ["cpu", "cpu"]
    steps1, steps2 = of_type(one, "step"), of_type(two, "step")
    assert [s["step"] for s in steps2] == [s["step"] for s in steps1] == list(range(1, 7))
    for a, b in zip(steps1, steps2):
        # The same data in the same order: the same token counts and epoch.
        assert (b["trainedTokens"], b["batchTokens"], b["epoch"]) == (a["trainedTokens"], a["batchTokens"], a["epoch"])
        assert b["loss"] == pytest.approx(a["loss"], rel=LOSS_RTOL), (a, b)
        assert b["gradNorm"] == pytest.approx(a["gradNorm"], rel=1e-4), (a, b)
        assert b["learningRate"] == a["learningRate"]
    # Training moved the loss: the comparison is not of two untrained runs.
    assert abs(steps1[-1]["loss"] - steps1[0]["loss"]) > 0.05
    val1 = [v["validationLoss"] for v in of_type(one, "validation")]
    val2 = [v["validationLoss"] for v in of_type(two, "validation")]
    assert len(val2) == len(val1) == 2 and val2 == pytest.approx(val1, rel=LOSS_RTOL)

    # Rank 0 alone writes: one checkpoint, one final adapter, the same tensors as one device's.
    assert [c["step"] for c in of_type(two, "checkpoint")] == [3]
    assert len(of_type(two, "completed")) == 1
    a = load_file(str(one_out / "adapter" / "adapter_model.safetensors"))
    b = load_file(str(two_out / "adapter" / "adapter_model.safetensors"))
    assert a.keys() == b.keys() and len(a) > 0
    for key in a:
        assert (a[key] - b[key]).abs().max().item() <= ADAPTER_ATOL, key


def children_of(pid):
    """Process ids whose parent is `pid`."""
    out = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            out.append(int(entry.name))
    return out


def rank_of(pid):
    env = (pathlib.Path("/proc") / str(pid) / "environ").read_bytes().split(b"\0")
    return next(int(e.split(b"=", 1)[1]) for e in env if e.startswith(b"RANK="))


def alive(pid):
    try:
        stat = (pathlib.Path("/proc") / str(pid) / "stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def start_training(tiny_models, bin_dir, tmp_path, ranks):
    """A long `trainer-job run` on `ranks` ranks, once it has trained a step: (process, events
    file, {rank: pid} of the other ranks)."""
    model = tiny_models("qwen3")
    data = write_jsonl(tmp_path / "train.jsonl", task_rows(40))
    plan = dp_plan(model, data, ranks, maxSteps=100000)
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(plan))
    events_path = tmp_path / "events"
    proc = subprocess.Popen([str(bin_dir / "trainer-job"), "run", "--plan", str(plan_path), "--output",
                             str(tmp_path / "out"), "--events", str(events_path)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if events_path.exists() and '"type":"step"' in events_path.read_text().replace(" ", ""):
            break
        time.sleep(0.2)
    assert proc.poll() is None, proc.stderr.read()
    others = {rank_of(p): p for p in children_of(proc.pid)}
    assert sorted(others) == list(range(1, ranks)), others
    return proc, events_path, others


def test_sigterm_stops_every_rank_at_the_same_step(tiny_models, bin_dir, tmp_path):
    proc, events_path, others = start_training(tiny_models, bin_dir, tmp_path, 2)
    try:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert events[-1]["type"] == "cancelled" and events[-1]["steps"] == of_type(events, "step")[-1]["step"]
    assert not alive(others[1])  # it stopped with rank 0 (rank 0 waited for it)


def test_a_rank_killed_with_sigkill_fails_the_job_naming_it(tiny_models, bin_dir, tmp_path):
    proc, events_path, ranks = start_training(tiny_models, bin_dir, tmp_path, 3)
    try:
        os.kill(ranks[1], signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, stderr
    failed = of_type([json.loads(line) for line in events_path.read_text().splitlines()], "failed")
    assert len(failed) == 1, failed
    reason = failed[0]["reason"]
    assert f"rank 1 (pid {ranks[1]}) was killed by signal 9 (SIGKILL)" in reason, reason
    assert reason in stderr
    # The other rank did not outlive the job.
    assert not alive(ranks[2])


def test_an_rl_plan_with_several_gpus_trains_on_one_device_and_says_so(tiny_models, job, tmp_path):
    from test_rl_run import rl_plan, rl_rows

    data = write_jsonl(tmp_path / "rl.jsonl", rl_rows(8))
    plan = rl_plan(tiny_models("qwen3"), data)
    plan["config"]["hyperparams"]["training"]["maxSteps"] = 1
    plan["execution"] = {"gpus": 2}
    _, events, stderr = run_job(job, tmp_path, "rl", plan)
    said = ("execution.gpus is 2, but grpo trains on one device: the run holds 2 devices and trains on one of them "
            "(data parallelism is SFT only")
    assert "warning: " + said in stderr
    assert [w for w in of_type(events, "warning") if said in w.get("message", "")], of_type(events, "warning")
    assert "data parallel over" not in stderr
    assert len(of_type(events, "devices")[0]["devices"]) == 1
    assert of_type(events, "completed")[0]["steps"] == 1
