"""Data parallelism through the CLI and a real trainerd on the local backend: on a deployment
without GPU pools, a CPU pool's declared devices are CPU slots, and a run with execution.gpus 2
holds two of them and trains on two ranks (docs/data-parallel.md). Its step losses are a
one-device run's, also when it is paused and resumed (every rank restores rank 0's snapshot)."""
from __future__ import annotations

import json

import pytest

from backend_support import Service
from cli_support import DATASET_NAME, MODEL_NAME, WORKLOAD


def plan(gpus: int, max_steps: int = 4) -> str:
    return "\n".join([
        "kind: run",
        f"workload: {WORKLOAD}",
        f"baseModel: {MODEL_NAME}",
        "config:",
        f"  dataset: {DATASET_NAME}",
        "  hyperparams:",
        "    optimizer: {learningRate: 0.003}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4, gradientAccumulation: 2}}",
        "  maxSeqLength: 128",
        "  model: {precision: FP32}",
        f"execution: {{gpus: {gpus}}}",
    ]) + "\n"


def test_two_cpu_slots_train_two_ranks_with_one_devices_losses(bin_dir, tiny_model, tmp_path):
    svc = Service(bin_dir, tmp_path, tiny_model,
                  {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 2}]}).ready()
    try:
        losses = {}
        for gpus in (0, 2):
            out = svc.cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(gpus))
            assert out.returncode == 0, out.stdout + out.stderr
            run_id = json.loads(out.stdout)["runId"]
            svc.wait_phase(run_id, "COMPLETED")
            assert svc.get(run_id)["placement"]["deviceIds"] == ([0] if gpus == 0 else [0, 1])
            # The job's own events (rank 0's): one device per rank.
            job_events = [p for p in svc.daemon.data_dir.rglob("events.jsonl") if run_id in str(p)]
            assert len(job_events) == 1, job_events
            devices = next(e for e in map(json.loads, job_events[0].read_text().splitlines())
                           if e["type"] == "devices")["devices"]
            assert [d["index"] for d in devices] == list(range(max(gpus, 1)))
            losses[gpus] = [e["loss"] for e in svc.events(run_id) if e["type"] == "step"]
        assert len(losses[2]) == 4
        assert losses[2] == pytest.approx(losses[0], rel=2e-5)
        # Three slots are more than the pool has: refused at submission, naming the field.
        out = svc.cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(3))
        assert out.returncode != 0
        assert "execution.gpus" in out.stderr and "no CPU training pool can ever hold a claim of 3 devices" in out.stderr
    finally:
        svc.close()


def test_two_ranks_paused_and_resumed_train_the_losses_of_one_device(bin_dir, tiny_model, tmp_path):
    svc = Service(bin_dir, tmp_path, tiny_model,
                  {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 2}]}).ready()
    steps = 16
    try:
        out = svc.cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(0, steps))
        reference = json.loads(out.stdout)["runId"]
        svc.wait_phase(reference, "COMPLETED")
        out = svc.cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(2, steps))
        run_id = json.loads(out.stdout)["runId"]
        svc.wait_step(run_id, 3)
        out = svc.cli("runs", "pause", run_id, "--checkpoint", "save")
        assert out.returncode == 0, out.stdout + out.stderr
        run = svc.wait_phase(run_id, "PAUSED")
        saved = run["pause"]["savedStep"]
        assert 3 <= saved < steps, run["pause"]
        svc.cli("runs", "resume", run_id, check=True)
        done = svc.wait_phase(run_id, "COMPLETED")
        assert done["attempt"] == 2
        ref = {m["step"]: m["loss"] for m in svc.metrics(reference)}
        got = {m["step"]: m["loss"] for m in svc.metrics(run_id)}
        assert sorted(got) == sorted(ref) == list(range(1, steps + 1))
        for step in ref:
            assert got[step] == pytest.approx(ref[step], rel=2e-5), (step, got[step], ref[step])
    finally:
        svc.close()
