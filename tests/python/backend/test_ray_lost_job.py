"""A Ray job the cluster lost fails its run by name (issue 13). The run's job trains on a Ray head
of the test's own. While trainerd is down, the job is killed without a word (SIGKILL: no event)
and the head is stopped (its daemons and workers); a new head, knowing nothing of the job, comes up
on the same dashboard address, as a head restarted without GCS fault tolerance does. trainerd,
started again, hears 404 for the job and fails the run naming the cluster and the job.

Why not `ray job delete` on the shared head: Ray's job manager re-creates a deleted job's record
when its monitor loop notices the job's supervisor actor gone after the delete (put_status writes
a new record "Job supervisor actor died" when it finds none), so whether the job stays deleted is a
race; a fresh head has no record of the job at all."""
from __future__ import annotations

import pathlib
import tempfile
import urllib.error

import pytest

from backend_support import TERMINAL, Service
from cli_support import kill_job_of
from clusters import RayHead, free_port

LONG = 100000


def test_a_job_the_cluster_lost_fails_the_run_by_name(bin_dir, tiny_model, tmp_path, repo):
    first = RayHead.start(repo, pathlib.Path(tempfile.mkdtemp(prefix="ray-a-", dir="/tmp")))
    second = None
    svc = None
    try:
        svc = Service(bin_dir, tmp_path / "svc", tiny_model, {
            "compute": {"backend": "ray", "ray": {"address": first.address}},
            "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}]}).ready()
        run_id = svc.start(max_steps=LONG, max_attempts=1)["runId"]
        running = svc.wait_step(run_id)
        sid = running["placement"]["job"].split()[-1]
        assert first.job(sid)["status"] == "RUNNING"
        # trainerd is down while the node dies: the job without a word (SIGKILL, no event), then the
        # head with everything it knew.
        svc.halt(kill=True)
        kill_job_of(run_id)
        first.stop()
        assert first.pids() == []
        second = RayHead.start(repo, pathlib.Path(tempfile.mkdtemp(prefix="ray-b-", dir="/tmp")),
                               ports=(free_port(), first.ports[1]))
        assert second.address == first.address
        with pytest.raises(urllib.error.HTTPError) as gone:
            second.job(sid)
        assert gone.value.code == 404
        svc.start_again()
        failed = svc.wait_phase(run_id, TERMINAL)
        assert failed["phase"] == "FAILED", failed
        reason = failed["failureReason"]
        assert reason.startswith(f"the Ray cluster at {first.address} no longer knows job {sid} "
                                 "(the cluster lost it, e.g. its head restarted)"), reason
        assert svc.cli.json("capacity")["claims"] == []  # the claim went with the run
    finally:
        if svc:
            svc.close()
        first.stop()
        if second:
            second.stop()
