"""GPU placement on the local backend: a claim is granted specific device indices of its pool, the
job sees exactly those in CUDA_VISIBLE_DEVICES, and concurrent runs never share one. The pool
declares GPUs this machine does not have: the jobs train on the CPU and only see the variable."""
from __future__ import annotations

from backend_support import Service, job_environment

LONG = 100000
GPU_POOL = {"name": "h100", "accelerator": "nvidia-h100-80gb", "declared": 4, "maxClaim": 2}


def test_concurrent_runs_get_their_own_devices(bin_dir, tiny_model, tmp_path):
    svc = Service(bin_dir, tmp_path, tiny_model,
                  {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}, GPU_POOL]}).ready()
    try:
        a = svc.start(max_steps=LONG, gpus=2)["runId"]
        b = svc.start(max_steps=LONG, gpus=2)["runId"]
        c = svc.start(max_steps=LONG, gpus=1)["runId"]
        svc.wait_step(a)
        svc.wait_step(b)
        # The pool's four devices are held by a and b: c waits.
        waiting = svc.wait_phase(c, "WAITING_FOR_DEVICES")
        assert waiting["claim"]["state"] == "QUEUED" and waiting["claim"]["deviceIds"] == []
        ids = {}
        for run_id in (a, b):
            run = svc.get(run_id)
            assert run["claim"]["state"] == "GRANTED"
            ids[run_id] = run["claim"]["deviceIds"]
            assert len(ids[run_id]) == 2
            assert run["placement"]["deviceIds"] == ids[run_id]
            assert run["placement"]["backend"] == "local" and run["placement"]["gpus"] == 2
            # The job itself was given exactly its devices.
            env = job_environment(run_id)
            assert env["CUDA_VISIBLE_DEVICES"] == ",".join(map(str, ids[run_id]))
            assert env["TRAINER_PROFILE"] == "nvidia-h100-80gb"
        assert sorted(ids[a] + ids[b]) == [0, 1, 2, 3]
        # trainer capacity shows the grants, as JSON and as text.
        cap = svc.cli.json("capacity")
        pool = next(p for p in cap["pools"] if p["name"] == "h100")
        assert pool["deviceIds"] == [0, 1, 2, 3] and pool["freeDeviceIds"] == [] and pool["granted"] == 4
        held = {cl["owner"]: cl["deviceIds"] for cl in cap["claims"]}
        assert held == {a: ids[a], b: ids[b], c: []}
        text = svc.cli("capacity", check=True).stdout
        assert "DEVICE IDS" in text and ",".join(map(str, ids[a])) in text
        shown = svc.cli("runs", "get", a, check=True).stdout
        assert "devices " + ",".join(map(str, ids[a])) in shown
        # a ends: c is granted the lowest of a's devices, and its job sees just that one.
        svc.cancel(a)
        svc.wait_phase(a, "CANCELLED")
        svc.wait_step(c)
        run_c = svc.get(c)
        assert run_c["claim"]["deviceIds"] == [min(ids[a])]
        assert job_environment(c)["CUDA_VISIBLE_DEVICES"] == str(min(ids[a]))
        # The grant stays on the ended run (its claim is released).
        ended = svc.get(a)
        assert "claim" not in ended and ended["placement"]["deviceIds"] == ids[a]
        for run_id in (b, c):
            svc.cancel(run_id)
            svc.wait_phase(run_id, "CANCELLED")
        assert svc.cli.json("capacity")["claims"] == []
    finally:
        svc.close()


def test_a_cpu_run_sees_no_gpu(bin_dir, tiny_model, tmp_path):
    svc = Service(bin_dir, tmp_path, tiny_model, {}).ready()
    try:
        run_id = svc.start(max_steps=LONG)["runId"]
        svc.wait_step(run_id)
        print(f"\nlocal: trainer runs start -> first training step: {svc.first_step_seconds(run_id):.1f} s")
        assert job_environment(run_id)["CUDA_VISIBLE_DEVICES"] == ""
        run = svc.get(run_id)
        assert run["claim"]["deviceIds"] == [0] and run["placement"]["gpus"] == 0
        svc.cancel(run_id)
        svc.wait_phase(run_id, "CANCELLED")
    finally:
        svc.close()


def test_a_pool_grants_from_the_device_indices_it_lists(bin_dir, tiny_model, tmp_path):
    pool = {**GPU_POOL, "declared": 2, "maxClaim": 1, "deviceIds": [5, 7]}
    svc = Service(bin_dir, tmp_path, tiny_model, {"pools": [pool]}).ready()
    try:
        run_id = svc.start(max_steps=LONG, gpus=1)["runId"]
        svc.wait_step(run_id)
        assert svc.get(run_id)["claim"]["deviceIds"] == [5]
        assert job_environment(run_id)["CUDA_VISIBLE_DEVICES"] == "5"
        svc.cancel(run_id)
        svc.wait_phase(run_id, "CANCELLED")
    finally:
        svc.close()
