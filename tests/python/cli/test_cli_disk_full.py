"""Disk full, end to end, on real small disks: tmpfs mounts of a few MB under a real trainerd's data
folder (this machine and CI run the tests as root), filled with a filler file at the right moment.

- the snapshots' disk full during a run: the run stops at once and pauses at its last committed
  snapshot, naming the full folder; once space is freed, `runs resume` completes it;
- the final snapshot's publication meets the full disk: the finished adapter stays staged, and
  the reason says where;
- a dataset upload meets a full disk: a clear error, nothing listed, the store intact;
- the job's own folder full when the engine writes a checkpoint: the run pauses by name and
  completes after a resume once space is freed;
- the data folder itself full (the store's writes fail): reads keep answering, the driver says
  the failing write once with a count instead of once a tick, and the run moves on once space
  is freed.
After each, SQLite's `PRAGMA integrity_check` of the store is "ok"; every mount is unmounted in
teardown."""
from __future__ import annotations

import contextlib
import os
import pathlib
import re
import signal
import sqlite3
import subprocess
import time

import pytest

from cli_support import (DATASET_NAME, EXAMPLES, MODEL_NAME, Cli, call, ended, get_run, job_pids, kill_job_of,
                         plan_text, prepare, run_snapshots, start_run_id, start_trainerd, stop, wait_for, wait_paused, wait_run,
                         wait_step)

MB = 1024 * 1024
PAGE = 4096


@contextlib.contextmanager
def tmpfs(path: pathlib.Path, size_mb: int):
    """A tmpfs of `size_mb` MB mounted on `path` (created) for the block; always unmounted after."""
    path.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(path)],
                         capture_output=True, text=True)
    assert out.returncode == 0, f"cannot mount a tmpfs on {path} (these tests run as root): {out.stderr}"
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def free_bytes(folder: pathlib.Path) -> int:
    st = os.statvfs(folder)
    return st.f_bavail * st.f_frsize


def fill(folder: pathlib.Path, leave: int = 0) -> pathlib.Path:
    """Writes a filler file in `folder` until its disk has about `leave` bytes free (0: none)."""
    filler = folder / "filler"
    left = max(0, free_bytes(folder) - leave)
    with open(filler, "wb") as f:
        while left > 0:
            n = min(left, MB)
            try:
                f.write(b"\xff" * n)
                f.flush()
            except OSError:
                break
            left -= n
    if leave == 0:
        assert free_bytes(folder) < 64 * 1024, f"{folder} is not full"
    return filler


def stored_size(folder: pathlib.Path) -> int:
    """The bytes `folder` takes on a tmpfs: each file in whole pages, plus a page per folder."""
    total = PAGE
    for p in folder.rglob("*"):
        total += PAGE if p.is_dir() else -(-p.stat().st_size // PAGE) * PAGE
    return total


def integrity(data_dir: pathlib.Path) -> str:
    db = sqlite3.connect(str(data_dir / "state.db"))
    try:
        return db.execute("PRAGMA integrity_check").fetchone()[0]
    finally:
        db.close()


def temporaries(folder: pathlib.Path) -> list[str]:
    return [str(p) for p in folder.rglob("*") if ".tmp." in p.name]


@pytest.fixture(scope="module")
def small_disks(bin_dir, tiny_model, tmp_path_factory):
    """trainerd whose data folder holds its snapshots and its datasets on two small tmpfs disks."""
    tmp = tmp_path_factory.mktemp("diskfull")
    data = tmp / "data"
    with tmpfs(data / "snapshots", 24) as snapshots, tmpfs(data / "datasets", 4) as datasets:
        service = start_trainerd(bin_dir, tmp, {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]})
        try:
            yield service, snapshots, datasets
        finally:
            stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def small(bin_dir, small_disks) -> Cli:
    service, _, _ = small_disks
    return prepare(Cli(bin_dir / "trainer", service.url))


@pytest.fixture(scope="module")
def snapshot_bytes(small, small_disks) -> int:
    """What one snapshot (weights and training state) of the tests' plan takes on the tmpfs,
    measured on a run of its own."""
    _, snapshots, _ = small_disks
    run_id = start_run_id(small, plan_text(2, save_every=2))
    run = ended(small, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    sizes = [stored_size(p) for p in snapshots.iterdir() if p.is_dir() and ".tmp." not in p.name]
    assert sizes, f"no snapshot folder in {snapshots}"
    return max(sizes)


def leave_room_for_one_snapshot(snapshots: pathlib.Path, one: int) -> pathlib.Path:
    """Fills the snapshots' disk so that one more snapshot fits and a second does not."""
    return fill(snapshots, leave=one + one // 2)


def test_a_run_whose_save_meets_a_full_disk_pauses_at_once_and_resumes_once_space_is_freed(
        small, small_disks, snapshot_bytes):
    service, snapshots, _ = small_disks
    steps = 40
    filler = leave_room_for_one_snapshot(snapshots, snapshot_bytes)
    try:
        run_id = start_run_id(small, plan_text(steps, save_every=2, keep_adapters=100))
        run = wait_paused(small, run_id, "PAUSED after its save met the full disk")
        pause = run["pause"]
        reason = pause["failureReason"]
        assert "no space left on the disk of the storage folder" in reason, reason
        assert str(service.data_dir) in reason and "snapshots/" in reason, reason
        assert pause["state"] == "pausedAfterFailedSave" and pause["requestedBy"] == "job", pause
        assert pause["savedStep"] == 2 and pause["snapshotId"] == run["savedSnapshot"], pause
        # It stopped at once: not trained on to the end with no saves.
        assert run["progress"]["step"] < steps, run["progress"]
        assert not job_pids(run_id)
        # Nothing half written is left, nor listed; the store is intact and reads answer.
        assert temporaries(snapshots) == []
        assert [s["savedStep"] for s in run_snapshots(small, run_id)] == [2]
        assert integrity(service.data_dir) == "ok"
        assert small("runs", "list").returncode == 0
    finally:
        filler.unlink()
    out = small("runs", "resume", run_id)
    assert out.returncode == 0, out.stdout + out.stderr
    done = ended(small, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["progress"]["step"] == steps and done["attempt"] == 2
    assert integrity(service.data_dir) == "ok"


def test_a_finished_adapter_whose_publication_meets_a_full_disk_is_kept_staged(small, small_disks, snapshot_bytes):
    service, snapshots, _ = small_disks
    filler = leave_room_for_one_snapshot(snapshots, snapshot_bytes)
    try:
        run_id = start_run_id(small, plan_text(4, save_every=2, keep_adapters=100))
        run = wait_paused(small, run_id, "PAUSED after its final snapshot met the full disk")
        reason = run["pause"]["failureReason"]
        assert "the final snapshot of step 4 was not published" in reason, reason
        assert "no space left on the disk of the storage folder" in reason, reason
        kept = re.search(r"its adapter is kept staged at (\S+)", reason)
        assert kept, reason
        adapter = pathlib.Path(kept.group(1))
        assert (adapter / "adapter_model.safetensors").is_file(), sorted(p.name for p in adapter.iterdir())
        assert run["pause"]["savedStep"] == 2
        assert temporaries(snapshots) == []
        assert integrity(service.data_dir) == "ok"
    finally:
        filler.unlink()
    small("runs", "resume", run_id, check=True)
    done = ended(small, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["progress"]["step"] == 4


def test_a_dataset_upload_that_meets_a_full_disk_fails_by_name_and_lists_nothing(small, small_disks, tmp_path):
    service, _, datasets = small_disks
    rows = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()
    upload = tmp_path / "more.jsonl"
    upload.write_text("\n".join(reversed(rows)) + "\n")  # other rows' order: another dataset
    before = small.json("datasets", "list")
    filler = fill(datasets)
    try:
        out = small("datasets", "create", "-f", upload, "--name", "after-full")
        assert out.returncode != 0
        assert "no space left on the disk of the storage folder" in out.stderr, out.stderr
        assert "datasets/" in out.stderr, out.stderr
        assert small.json("datasets", "list") == before
        assert small("datasets", "get", "after-full").returncode != 0
        assert temporaries(datasets) == []
        assert integrity(service.data_dir) == "ok"
        assert small("datasets", "get", DATASET_NAME).returncode == 0  # reads answer
    finally:
        filler.unlink()
    again = small("datasets", "create", "-f", upload, "--name", "after-full")
    assert again.returncode == 0, again.stderr
    assert small("datasets", "get", "after-full").returncode == 0


def test_a_full_data_folder_strands_no_run_and_is_logged_once_with_a_count(bin_dir, tiny_model, tmp_path):
    data = tmp_path / "data"
    with tmpfs(data, 64):
        service = start_trainerd(bin_dir, tmp_path, {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]})
        try:
            cli = prepare(Cli(bin_dir / "trainer", service.url))
            run_id = start_run_id(cli, plan_text(400, max_attempts=3))
            wait_step(cli, run_id, 2)
            errors_before = call(service.url + "/v1/info")[1]["driver"]["errors"]
            filler = fill(data)
            kill_job_of(run_id)  # the job dies while nothing can be written
            # Many driver passes fail to record that; each is counted, the log says it once.
            wait_for(lambda: call(service.url + "/v1/info")[1]["driver"]["errors"] >= errors_before + 20,
                     timeout=120, what="driver passes failing on the full disk")
            full_lines = [line for line in service.log_text().splitlines()
                          if f"run {run_id}:" in line and "no space left on the disk of the data folder" in line]
            assert len(full_lines) == 1, "\n".join(full_lines[:5])
            assert str(data) in full_lines[0]
            # Reads keep answering.
            assert get_run(cli, run_id)["runId"] == run_id
            assert cli("runs", "list").returncode == 0
            filler.unlink()
            # Once space is freed, the run moves on (a new attempt, to its end), and the log says
            # how long the failure lasted.
            wait_run(cli, run_id, lambda r: r["attempt"] >= 2 or r["phase"] in ("COMPLETED", "FAILED"),
                     "a new attempt once space was freed", timeout=120)
            recovered = [line for line in service.log_text().splitlines()
                         if f"run {run_id}: recovered after failing" in line]
            assert len(recovered) == 1, service.log_text()[-3000:]
            count = int(re.search(r"failing (\d+) times", recovered[0]).group(1))
            assert count >= 20
            cli("runs", "cancel", run_id, "--force")
            ended(cli, run_id)
            assert integrity(service.data_dir) == "ok"
        finally:
            stop(service.proc, service.data_dir)


def saving(output: pathlib.Path) -> bool:
    """Whether the job is between writing a checkpoint and staging it (a folder half made)."""
    return any(".writing-" in p.name or p.name.endswith(".staging") or ".tmp-" in p.name for p in output.rglob("*"))


def test_a_checkpoint_the_engine_cannot_write_pauses_the_run_by_name(bin_dir, tiny_model, tmp_path):
    """The job's own folder (where the engine writes each checkpoint before staging it) on a small
    disk that fills during training: the engine's write fails by name, the run pauses at its
    newest committed snapshot, and completes once space is freed."""
    data = tmp_path / "data"
    with tmpfs(data / "runs", 48) as runs:
        service = start_trainerd(bin_dir, tmp_path, {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]})
        try:
            cli = prepare(Cli(bin_dir / "trainer", service.url))
            steps = 60
            run_id = start_run_id(cli, plan_text(steps, save_every=2, keep_adapters=100))
            wait_run(cli, run_id, lambda r: r.get("savedStep", 0) >= 2, "a committed snapshot")
            [pid] = wait_for(lambda: job_pids(run_id), what="the run's trainer-job")
            output = runs / run_id / "attempt-1" / "output"
            # Filled while the job is stopped between saves: its next save is the engine's write.
            os.kill(pid, signal.SIGSTOP)
            try:
                while saving(output):
                    os.kill(pid, signal.SIGCONT)
                    time.sleep(0.02)
                    os.kill(pid, signal.SIGSTOP)
                filler = fill(runs)
            finally:
                os.kill(pid, signal.SIGCONT)
            try:
                run = wait_paused(cli, run_id, "PAUSED after the engine's checkpoint met the full disk")
                reason = run["pause"]["failureReason"]
                assert "no space left on the disk of the job's checkpoint folder" in reason, reason
                assert str(output / "checkpoints") in reason, reason
                assert run["pause"]["requestedBy"] == "job", run["pause"]
                assert run["pause"]["snapshotId"] == run["savedSnapshot"], run["pause"]
                assert run["progress"]["step"] < steps, run["progress"]
                assert not list((output / "checkpoints").glob(".writing-*")), "a half-written checkpoint was left"
                assert integrity(service.data_dir) == "ok"
            finally:
                filler.unlink()
            cli("runs", "resume", run_id, check=True)
            done = ended(cli, run_id)
            assert done["phase"] == "COMPLETED", done.get("failureReason")
            assert done["progress"]["step"] == steps and done["attempt"] == 2, done["progress"]
        finally:
            stop(service.proc, service.data_dir)
