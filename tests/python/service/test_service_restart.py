"""trainerd killed with SIGKILL and restarted: no run is lost or stuck, no claim leaks."""
import os
import signal
import time
from datetime import datetime

from service_helpers import Trainerd, plan
from waiting import wait_for


def restart(d: Trainerd) -> Trainerd:
    d.kill(signal.SIGKILL)
    return d.start()


def job_pid(d: Trainerd, run_id: str) -> int:
    needle = str(d.data_dir / "runs" / run_id)
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if needle in cmd and " run " in cmd:
                return int(entry)
    raise AssertionError(f"no job process for {run_id}")


def ended(pid: int) -> bool:
    """The process is gone or a zombie: what trainerd's recovery takes for a job not running."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True



def kill_both_while_training(d, run_id: str, down_seconds: float = 0.0) -> tuple[int, float]:
    """Once the run trains: SIGKILLs trainerd, then the run's job, waits for the job to end and
    (after `down_seconds` more of downtime) starts trainerd again. Returns the job's pid and the
    wall time of its kill."""
    d.wait_phase(run_id, "TRAINING")
    pid = job_pid(d, run_id)
    d.kill(signal.SIGKILL)
    killed_at = time.time()
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: ended(pid), timeout=30, what=f"the job (pid {pid}) to end")
    time.sleep(down_seconds)  # trainerd stays down: the time the test is about
    d.start()
    return pid, killed_at

def test_a_run_training_when_trainerd_is_killed_continues_after_restart(start_trainerd, setup_basics,
                                                                         standin_behaviour):
    standin_behaviour(steps=30, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=30)), 201)
    before = d.wait_phase(run["runId"], "TRAINING")
    pid = job_pid(d, run["runId"])
    d = restart(d)
    assert job_pid(d, run["runId"]) == pid  # the same job, found again
    info = d.ok(d.get("/v1/info"), 200)
    step = next(s for s in info["startup"]["steps"] if s["name"] == "recover runs")
    assert step["ok"] and "1 jobs found running" in step["message"]
    done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"})
    assert done["phase"] == "COMPLETED", done
    assert done["attempt"] == 1 and done["progress"]["step"] == 30
    history = [p["phase"] for p in done["phaseHistory"]]
    assert history == ["SIZING_DATASET", "SUBMITTING", "QUEUED", "PREPARING", "TRAINING", "FINALIZING",
                       "CLEANING_UP", "COMPLETED"]
    steps = d.ok(d.get(f"/v1/runs/{run['runId']}/metrics"), 200)["steps"]
    assert [s["step"] for s in steps] == list(range(1, 31))  # none lost, none twice
    events = d.ok(d.get(f"/v1/runs/{run['runId']}/events"), 200)["events"]
    assert len([e for e in events if e["type"] == "step"]) == 30
    assert done["createdAt"] == before["createdAt"]
    assert d.capacity()["claims"] == []


def test_a_job_lost_while_trainerd_is_down_gets_a_new_attempt(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=200, stepSeconds=0.05)
    d = start_trainerd(limits={"attemptBackoffSeconds": 1})
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=200)), 201)
    pid, _ = kill_both_while_training(d, run["runId"])
    done = d.wait_phase(run["runId"], {"FAILED", "COMPLETED", "CANCELLED"})
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    assert done["attempt"] == 2
    lost = done["attempts"][0]
    assert lost["cause"] == "lost" and lost["reason"].startswith(
        f"the training job (pid {pid}) ended while trainerd was not running and reported no outcome"), lost


def test_a_job_that_dies_while_trainerd_is_down_ends_with_a_named_failure(start_trainerd, setup_basics,
                                                                         standin_behaviour):
    standin_behaviour(steps=1000, stepSeconds=0.05)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(max_attempts=1)), 201)  # no new attempt: the run fails by name
    pid, killed_at = kill_both_while_training(d, run["runId"], down_seconds=3.0)
    failed = d.wait_phase(run["runId"], {"FAILED", "COMPLETED", "CANCELLED"})
    assert failed["phase"] == "FAILED" and failed["outcome"] == "FAILED"
    assert failed["failureReason"].splitlines()[0] == \
        f"the training job (pid {pid}) ended while trainerd was not running and reported no outcome"
    # The job's end is taken from its last sign of life (its last event), not from when the
    # restarted trainerd found it gone: the 3 s trainerd was down are neither its time nor its cost.
    attempt = failed["attempts"][0]
    started, ended_at = (datetime.fromisoformat(attempt[k].replace("Z", "+00:00")).timestamp()
                         for k in ("started", "ended"))
    assert started < ended_at <= killed_at + 0.5, (attempt, killed_at)
    assert failed["cost"]["estimated"] is False
    assert 0 < failed["cost"]["gpuSeconds"] <= (killed_at + 0.5 - started) * failed.get("devices", 1), failed["cost"]
    assert d.capacity()["claims"] == []


def test_a_run_that_completed_while_trainerd_was_down_is_completed(start_trainerd, setup_basics,
                                                                   standin_behaviour):
    standin_behaviour(steps=10, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan(steps=10)), 201)
    d.wait_phase(run["runId"], "TRAINING")
    pid = job_pid(d, run["runId"])
    d.kill(signal.SIGKILL)
    deadline = time.time() + 30
    while time.time() < deadline:  # wait for the job to finish on its own
        try:
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.1)
    d.start()
    done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"})
    assert done["phase"] == "COMPLETED", done
    assert done["progress"]["step"] == 10
    assert d.capacity()["claims"] == []


def test_queued_claims_survive_a_restart_and_are_admitted(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=20, stepSeconds=0.1)
    d = start_trainerd()
    setup_basics(d)
    first = d.ok(d.post("/v1/runs", plan()), 201)
    second = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(second["runId"], "WAITING_FOR_DEVICES")
    d = restart(d)
    assert {c["owner"]: c["state"] for c in d.capacity()["claims"]} == \
        {first["runId"]: "GRANTED", second["runId"]: "QUEUED"}
    d.wait_phase(first["runId"], "COMPLETED")
    d.wait_phase(second["runId"], "COMPLETED")
    assert d.capacity()["claims"] == []


def test_cancel_after_a_restart_stops_the_job_found_again(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=1000, stepSeconds=0.05)
    d = start_trainerd()
    setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    d.wait_phase(run["runId"], "TRAINING")
    pid = job_pid(d, run["runId"])
    d = restart(d)
    d.ok(d.post(f"/v1/runs/{run['runId']}/cancel"), 202)
    d.wait_phase(run["runId"], "CANCELLED")
    deadline = time.time() + 10
    while time.time() < deadline and os.path.exists(f"/proc/{pid}"):
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] if os.path.exists(f"/proc/{pid}") else "X"
        if state == "Z":
            break
        time.sleep(0.05)
    assert not os.path.exists(f"/proc/{pid}") or \
        open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0] == "Z"
    assert d.capacity()["claims"] == []


def test_sigkill_during_a_burst_of_submissions_loses_no_accepted_run(start_trainerd, setup_basics,
                                                                     standin_behaviour):
    import concurrent.futures
    import urllib.error

    standin_behaviour(steps=2, stepSeconds=0.05)
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 4, "maxClaim": 1}])
    setup_basics(d)
    # The first plan on a dataset, model and length is measured (trainer-job analyze); do that
    # before the burst, which must be answered within its first half second.
    d.post("/v1/runs?dryRun=true", plan())
    accepted = []

    def submit(i):
        try:
            r = d.post("/v1/runs", plan(submissionId=f"burst-{i}"))
        except (urllib.error.URLError, ConnectionError, OSError):
            return None  # trainerd died before answering: the client would retry with the same id
        return (i, r.json["runId"]) if r.status == 201 else None

    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(submit, i) for i in range(40)]
        time.sleep(0.5)
        d.kill(signal.SIGKILL)
        accepted = [f.result() for f in futures if f.result()]
    assert accepted, "no submission was answered before the kill"
    d.start()
    # Every acknowledged run exists; a retry with its submissionId reaches the same run.
    for i, run_id in accepted:
        again = d.post("/v1/runs", plan(submissionId=f"burst-{i}"))
        assert again.status == 200 and again.json["runId"] == run_id
    # Every run in the store is driven to an end; no claim is left behind.
    everything = d.ok(d.get("/v1/runs?limit=1000"), 200)["runs"]
    for run in everything:
        done = d.wait_phase(run["runId"], {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
        assert done["phase"] == "COMPLETED", done
    assert d.capacity()["claims"] == []
