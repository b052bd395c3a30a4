"""Capacity windows and device-hours (issue 29) through the real CLI against a real trainerd whose
time is a manual clock (TRAINER_TEST_CLOCK_FILE: the service reads its wall time from a file the
test writes). The only pool is one CPU slot always, and two more in a window from 18:10 to 18:20
UTC: a run of execution.gpus 2 (two CPU slots, no GPU pool declared) fits only while the window
is open.

Every claim's grant and release happen while the clock stands still, so their times are exactly
the clock's, and device-hours must equal the hand computation to the second."""
from __future__ import annotations

import datetime
import json
import os
import subprocess
import urllib.request

import pytest

from cli_support import (DATASET_NAME, MODEL_NAME, WORKLOAD, Cli, cancel_run, plan_text, prepare, start_trainerd,
                         stop, wait_for)
from overlap_rule import write_rule

T0 = datetime.datetime(2026, 1, 31, 18, 0, 0, tzinfo=datetime.timezone.utc)
OPENS, CLOSES = T0 + datetime.timedelta(minutes=10), T0 + datetime.timedelta(minutes=20)
OTHER = "cap-other"  # a second workload, for --workload and --by workload
LONG = 100000        # steps: no run here ends by itself; each ends when the test cancels it


def iso(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture(scope="module")
def service(bin_dir, tiny_model, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("capacity")
    clock = tmp / "clock"
    clock.write_text(str(T0.timestamp()))
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 3, "hostRamGiB": 16,
                         "windows": [{"devices": 2, "opens": iso(OPENS), "closes": iso(CLOSES)}]}]}
    trainerd = start_trainerd(bin_dir, tmp, config, env={"TRAINER_TEST_CLOCK_FILE": str(clock)})
    cli = prepare(Cli(bin_dir / "trainer", trainerd.url))
    cli("workloads", "create", OTHER, check=True)
    yield trainerd, cli, clock
    stop(trainerd.proc, trainerd.data_dir)


def set_clock(clock, t: datetime.datetime) -> None:
    """Moves trainerd's clock to `t`: the file is replaced whole, so no reading sees half of it."""
    staged = clock.with_suffix(".next")
    staged.write_text(str(t.timestamp()))
    os.replace(staged, clock)


def declared_gauge(trainerd) -> float:
    with urllib.request.urlopen(trainerd.url + "/metrics", timeout=30) as r:
        lines = [line for line in r.read().decode().splitlines()
                 if line.startswith("akka_optimize_training_pool_devices_declared{")]
    assert len(lines) == 1, lines
    return float(lines[0].rsplit(" ", 1)[1])


def plan(gpus: int = 0, workload: str = WORKLOAD) -> str:
    return (plan_text(LONG).replace("gpus: 0", f"gpus: {gpus}")
            .replace(f"workload: {WORKLOAD}", f"workload: {workload}"))


def submit(cli, gpus: int = 0, workload: str = WORKLOAD) -> str:
    return cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan(gpus, workload),
               check=True).stdout.strip()


def claim_of(cli, owner: str) -> dict | None:
    return next((c for c in cli.json("capacity")["claims"] if c["owner"] == owner), None)


def wait_state(cli, owner: str, state: str | None) -> None:
    """Waits until `owner`'s claim is in `state` (None: released)."""
    def check():
        c = claim_of(cli, owner)
        return (c is None) if state is None else (c is not None and c["state"] == state)
    wait_for(check, 300, f"claim of {owner} to be {state or 'released'}")


def cancel(cli, run_id: str) -> None:
    cancel_run(cli, run_id)
    wait_state(cli, run_id, None)


def test_a_window_admits_a_queued_claim_and_its_end_warns_without_stopping_it(service):
    """One test in sequence on the clock: the window opens around a queued claim, closes while it
    is held, and device-hours of three claims across the boundary is the hand computation."""
    _, cli, clock = service
    # 18:00: A (one slot) is granted at once; B (two slots) waits: the pool declares one.
    a = submit(cli)
    wait_state(cli, a, "GRANTED")
    b = submit(cli, gpus=2, workload=OTHER)
    wait_state(cli, b, "QUEUED")
    pool = cli.json("capacity")["pools"][0]
    assert (pool["declared"], pool["granted"], pool["free"], pool["outside"], pool["queued"]) == (1, 1, 0, 0, 2)
    assert pool["free"] + pool["granted"] + pool["outside"] == pool["declared"]
    assert [w["open"] for w in pool["windows"]] == [False]
    assert declared_gauge(service[0]) == 1
    assert cli.json("capacity")["cluster"] is None  # the local backend has no cluster to read
    assert "Cluster" not in cli("capacity", check=True).stdout

    # 18:10: the window opens; B gets its two devices (the window's), A keeps the pool's own.
    set_clock(clock, OPENS)
    wait_state(cli, b, "GRANTED")
    cap = cli.json("capacity")
    pool = cap["pools"][0]
    assert (pool["declared"], pool["granted"], pool["free"], pool["outside"], pool["queued"]) == (3, 3, 0, 0, 0)
    assert claim_of(cli, b)["deviceIds"] == [1, 2] and claim_of(cli, a)["deviceIds"] == [0]
    assert claim_of(cli, b)["since"].startswith("2026-01-31T18:10:00")
    assert cap["warnings"] == []
    assert declared_gauge(service[0]) == 3  # /metrics' DECLARED counts the open window too
    text = cli("capacity", check=True).stdout
    assert "Windows" in text and "2026-01-31T18:10:00Z" in text and "open" in text, text
    assert "Warnings" not in text, text

    # 18:15: A is cancelled (released at 18:15); C (one slot) is granted the freed device.
    set_clock(clock, T0 + datetime.timedelta(minutes=15))
    cancel(cli, a)
    c = submit(cli)
    wait_state(cli, c, "GRANTED")

    # 18:25: the window has ended while B holds its devices: a warning, and B is not stopped.
    set_clock(clock, T0 + datetime.timedelta(minutes=25))
    cap = wait_for(lambda: (lambda d: d if d["warnings"] else None)(cli.json("capacity")), 60, "a warning")
    pool = cap["pools"][0]
    assert (pool["declared"], pool["granted"], pool["outside"], pool["free"]) == (1, 1, 0, 0)
    assert pool["heldBeyondDeclared"] == 2
    [warning] = cap["warnings"]
    assert warning["owner"] == b and warning["deviceIds"] == [1, 2] and warning["workload"] == OTHER
    text = cli("capacity", check=True).stdout
    assert "Warnings" in text and b in text and "it is not stopped" in text and "(ended)" in text, text
    assert claim_of(cli, b)["state"] == "GRANTED"
    assert cli.json("runs", "get", b)["phase"] not in ("CANCELLED", "FAILED", "COMPLETED")

    # --workload keeps that workload's claims, quota and warnings; the pools stay whole.
    mine = cli.json("capacity", "--workload", OTHER)
    assert [x["owner"] for x in mine["claims"]] == [b]
    assert [q["workload"] for q in mine["quotas"]] == [OTHER] and mine["quotas"][0]["held"] == 2
    assert mine["pools"] == cap["pools"]
    assert len(mine["warnings"]) == 1
    theirs = cli.json("capacity", "--workload", WORKLOAD)
    assert [x["owner"] for x in theirs["claims"]] == [c] and theirs["warnings"] == []
    text = cli("capacity", "--workload", WORKLOAD, check=True).stdout
    assert c[:8] in text and b[:8] not in text, text
    unknown = cli("capacity", "--workload", "nope")
    assert unknown.returncode != 0 and "no workload named 'nope'" in unknown.stderr, unknown.stderr

    # 18:30: B is cancelled (released at 18:30); C holds on.
    set_clock(clock, T0 + datetime.timedelta(minutes=30))
    cancel(cli, b)
    assert cli.json("capacity")["warnings"] == []

    # 18:40, device-hours from 18:05 to 19:00, by hand:
    #   A: 1 device 18:05 (clipped) to 18:15 =  600 s
    #   B: 2 devices 18:10 to 18:30          = 2400 s
    #   C: 1 device 18:15 to now (18:40)     = 1500 s, still held
    set_clock(clock, T0 + datetime.timedelta(minutes=40))
    span = ["--from", "2026-01-31T18:05:00Z", "--to", "2026-01-31T19:00:00Z"]
    hours = cli.json("capacity", "device-hours", *span)
    assert hours["from"] == "2026-01-31T18:05:00Z" and hours["to"] == "2026-01-31T19:00:00Z"
    assert [(r["key"], r["pool"], r["deviceSeconds"], r["held"]) for r in hours["rows"]] == [
        ("cpu", "cpu", 600 + 2400 + 1500, True)]
    assert hours["rows"][0]["deviceHours"] == pytest.approx(4500 / 3600)
    by_workload = cli.json("capacity", "device-hours", *span, "--by", "workload")
    assert {r["key"]: (r["deviceSeconds"], r["held"]) for r in by_workload["rows"]} == {
        WORKLOAD: (600 + 1500, True), OTHER: (2400, False)}
    assert cli.json("capacity", "device-hours", *span, "--by", "endpoint")["rows"] == []  # no endpoints
    text = cli("capacity", "device-hours", *span, check=True).stdout
    assert "KEY" in text and "DEVICE HOURS" in text and "HELD" in text and "1.2500" in text, text
    # The default period is the last 24 hours up to the service's clock.
    default = cli.json("capacity", "device-hours")
    assert (default["from"], default["to"]) == ("2026-01-30T18:40:00Z", "2026-01-31T18:40:00Z")
    assert default["rows"][0]["deviceSeconds"] == 900 + 2400 + 1500  # A counts from its grant at 18:00
    held = cli("capacity", "device-hours", *span, "--jq", ".rows[] | select(.held) | .key", check=True)
    assert held.stdout.split() == ["cpu"]
    cancel(cli, c)


def test_a_run_no_window_can_hold_is_refused_at_submission_naming_the_pool_and_its_windows(service):
    _, cli, _ = service
    before = len(cli.json("runs", "list")["runs"])
    out = cli("runs", "start", "-f", "-", "--force", input=plan(gpus=4))
    assert out.returncode != 0
    assert "execution.gpus" in out.stderr and "pools: cpu (maxClaim 3, declared 1, windows: +2 from " \
        "2026-01-31T18:10:00Z to 2026-01-31T18:20:00Z" in out.stderr, out.stderr
    # The window has ended (the test above moved the clock past it): a claim of two no longer fits.
    out = cli("runs", "start", "-f", "-", "--force", input=plan(gpus=2))
    assert out.returncode != 0 and "(ended)" in out.stderr and "no remaining window" in out.stderr, out.stderr
    assert len(cli.json("runs", "list")["runs"]) == before


def test_a_claim_still_queued_when_its_windows_have_ended_fails_naming_the_pool_and_windows(bin_dir, tiny_model,
                                                                                           tmp_path):
    """A claim of three slots fits only while the window is open and waits for it; the clock then
    passes the window's end before it was granted: nothing can ever hold it, so its run fails
    naming the pool and its windows, and the claim is released."""
    clock = tmp_path / "clock"
    clock.write_text(str(T0.timestamp()))
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 3,
                         "windows": [{"devices": 2, "opens": iso(OPENS), "closes": iso(CLOSES)}]}]}
    trainerd = start_trainerd(bin_dir, tmp_path, config, env={"TRAINER_TEST_CLOCK_FILE": str(clock)})
    try:
        cli = prepare(Cli(bin_dir / "trainer", trainerd.url))
        run = submit(cli, gpus=3)
        wait_state(cli, run, "QUEUED")
        assert cli.json("runs", "get", run)["phase"] == "WAITING_FOR_DEVICES"
        set_clock(clock, CLOSES + datetime.timedelta(minutes=5))  # past the window, which never opened for it
        done = wait_for(lambda: (lambda r: r if r["phase"] == "FAILED" else None)(cli.json("runs", "get", run)), 300,
                        "the run to fail")
        reason = done["failureReason"]
        assert reason.startswith("waiting for devices: pool cpu can never hold this claim of 3 devices"), reason
        assert f"+2 from {iso(OPENS)} to {iso(CLOSES)} (ended)" in reason, reason
        wait_state(cli, run, None)
    finally:
        stop(trainerd.proc, trainerd.data_dir)


def test_an_evaluation_whose_window_has_ended_before_its_claim_was_granted_fails_naming_the_pool(
        bin_dir, tiny_model, tmp_path):
    """Evaluations claim devices as runs do: with a pool that has none but in a window, an
    evaluation queued for the window fails once the window has ended, naming the pool and the
    window, and its claim is released."""
    clock = tmp_path / "clock"
    clock.write_text(str(T0.timestamp()))
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 0,
                         "windows": [{"devices": 1, "opens": iso(OPENS), "closes": iso(CLOSES)}]}]}
    trainerd = start_trainerd(bin_dir, tmp_path, config, env={"TRAINER_TEST_CLOCK_FILE": str(clock)})
    try:
        cli = prepare(Cli(bin_dir / "trainer", trainerd.url))
        rule = write_rule(tmp_path)
        evaluation = cli.json("evaluations", "start", "--model", MODEL_NAME, "--dataset", DATASET_NAME,
                              "--grader", f"rule:{rule}", "--max-new-tokens", "4",
                              "--workload", WORKLOAD)["evaluationId"]
        wait_state(cli, evaluation, "QUEUED")
        set_clock(clock, CLOSES + datetime.timedelta(minutes=5))  # past the window, which never opened for it
        done = wait_for(lambda: (lambda e: e if e["phase"] == "FAILED" else None)(
            cli.json("evaluations", "get", evaluation)), 300, "the evaluation to fail")
        reason = done["failureReason"]
        assert reason.startswith("waiting for devices: pool cpu can never hold this claim of 1 device: it declares 0"), \
            reason
        assert f"+1 from {iso(OPENS)} to {iso(CLOSES)} (ended)" in reason, reason
        wait_state(cli, evaluation, None)
    finally:
        stop(trainerd.proc, trainerd.data_dir)


@pytest.mark.parametrize("args, message", [
    (["--from", "yesterday"], '--from "yesterday" is not an ISO 8601 UTC time'),
    (["--to", "2026-02-30T00:00:00Z"], '--to "2026-02-30T00:00:00Z" is not an ISO 8601 UTC time'),
    (["--from", "2026-01-31T12:00:00Z", "--to", "2026-01-31T11:00:00Z"],
     "--from 2026-01-31T12:00:00Z is not before --to 2026-01-31T11:00:00Z"),
    (["--from", "2025-01-01T00:00:00Z", "--to", "2026-01-31T00:00:00Z"], "is 395 days long; device-hours reads at most 366 days"),
    (["--from", "2024-01-01T00:00:00Z"], "from: the range 2024-01-01T00:00:00Z to "),
    (["--by", "owner"], '--by "owner" is not a grouping; use pool, endpoint or workload'),
])
def test_device_hours_refuses_bad_values_by_name(service, args, message):
    _, cli, _ = service
    out = cli("capacity", "device-hours", *args)
    assert out.returncode != 0 and message in out.stderr, out.stderr
    assert out.stdout == ""


def test_a_window_config_error_is_refused_at_start_naming_the_field(bin_dir, tmp_path):
    config = {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1,
                         "windows": [{"devices": 2, "opens": "2026-01-31T18:00:00Z", "closes": "soon"}]}]}
    (tmp_path / "bad.json").write_text(json.dumps(config))
    out = subprocess.run([str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(tmp_path / "bad.json")], capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert 'pools[0].windows[0].closes: "soon" is not a UTC time' in out.stderr, out.stderr


def test_a_runs_host_memory_figure_over_its_pools_host_ram_is_a_warning(bin_dir, tiny_model, tmp_path):
    """The host-RAM check: a CPU run's host memory figure (the peak of the tensors its job held,
    memory.allocatedPeakBytes) against its pool's HOST RAM, here stated far too small (0.0001 GiB,
    about 100 KiB) for even the tiny model."""
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
              "pools": [{"name": "small", "accelerator": "cpu", "declared": 1, "hostRamGiB": 0.0001}]}
    trainerd = start_trainerd(bin_dir, tmp_path, config)
    try:
        cli = prepare(Cli(bin_dir / "trainer", trainerd.url))
        run = submit(cli)
        figure = wait_for(lambda: cli.json("runs", "get", run).get("memory", {}).get("allocatedPeakBytes"), 300,
                          "the run's first memory figure")
        cap = wait_for(lambda: (lambda d: d if d["warnings"] else None)(cli.json("capacity")), 60, "the warning")
        [warning] = cap["warnings"]
        assert warning["reason"] == "hostRam" and warning["owner"] == run and warning["hostRamGiB"] == 0.0001
        assert warning["hostMemoryGiB"] >= figure / 2**30 > 0.0001
        [claim] = cap["claims"]
        assert claim["hostMemoryGiB"] == warning["hostMemoryGiB"]
        assert cap["pools"][0]["hostRamGiB"] == 0.0001
        text = cli("capacity", check=True).stdout
        assert "Warnings" in text and "host memory figure" in text and "over pool small's HOST RAM of 0.0001 GiB" \
            in text, text
        assert "0.0001 GiB" in text.split("Windows")[0].split("Claims")[0], text  # the HOST RAM column
        cancel(cli, run)
        assert cli.json("capacity")["warnings"] == []
    finally:
        stop(trainerd.proc, trainerd.data_dir)


def test_scan_reports_the_node_and_its_leftover_job_folders(service, bin_dir):
    """`trainer capacity scan` after the runs above ended: their attempt folders are left over.
    NVML is absent on a CPU host: the devices reading names why, and the exit status stays 0."""
    trainerd, cli, _ = service
    out = cli("capacity", "scan", "-o", "json")
    assert out.returncode == 0, out.stderr
    scan = json.loads(out.stdout)
    assert scan["backend"] == "local"
    [node] = scan["nodes"]
    version = subprocess.run([str(bin_dir / "trainer-job"), "--version"], capture_output=True, text=True,
                             check=True).stdout.split()[1]
    assert node["version"] == version
    assert [d["role"] for d in node["disks"]] == ["data", "tmp", "shm"]
    data = node["disks"][0]
    assert data["path"] == str(trainerd.data_dir) and data["freeBytes"] > 0, data
    assert node["devices"]["gpus"] or "NVML not available" in node["devices"]["error"], node["devices"]
    folders = node["jobFolders"]
    assert folders and all(f["leftover"] for f in folders), folders  # every run here was cancelled
    assert all(f["path"].startswith(str(trainerd.data_dir / "runs")) for f in folders), folders
    text = cli("capacity", "scan", check=True).stdout
    assert f"(trainer-job {version})" in text and "FOLDER" in text and "Leftover job folders" in text, text


def test_a_folder_scan_cannot_read_is_named_and_the_exit_status_stays_zero(bin_dir, tmp_path):
    missing = tmp_path / "no-such-tmp"
    trainerd = start_trainerd(bin_dir, tmp_path, {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1}]},
                              env={"TMPDIR": str(missing)})
    try:
        cli = Cli(bin_dir / "trainer", trainerd.url)
        out = cli("capacity", "scan", "-o", "json")
        assert out.returncode == 0, out.stderr
        [node] = json.loads(out.stdout)["nodes"]
        tmp = next(d for d in node["disks"] if d["role"] == "tmp")
        assert tmp["path"] == str(missing) and "freeBytes" not in tmp and tmp["error"], tmp
        assert node["jobFolders"] == []
        text = cli("capacity", "scan")
        assert text.returncode == 0 and "unreadable: " in text.stdout, text.stdout
    finally:
        stop(trainerd.proc, trainerd.data_dir)
