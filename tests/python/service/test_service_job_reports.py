"""A job reports to trainerd over the API (docs/job-protocol.md, "Reporting to trainerd").

Each attempt has an id and a token (TRAINER_JOB_ID, TRAINER_JOB_TOKEN); its events and log lines
are posted to POST /v1/jobs/{id}/events and /logs, stored by (attempt, seq) so that a repeated
post changes nothing, and a wrong token or an unknown attempt is refused without changing
anything. A real trainer-job posts its events and its log; one that cannot reach trainerd buffers
them and delivers them once trainerd is back on the same port.
"""
import json
import signal
import sqlite3
import time
import urllib.error
import urllib.request

from service_helpers import plan
from waiting import wait_for

STEP = {"type": "step", "step": 1, "totalSteps": 3, "loss": 0.5, "learningRate": 1e-4, "gradNorm": 1.0,
        "tokenAccuracy": 0.5, "tokensPerSecond": 1000.0, "batchTokens": 64, "stepSeconds": 0.05}


def post_as_job(d, job_id, token, route, body):
    """POSTs `body` to /v1/jobs/{job_id}/{route} with the bearer token; (status, answer)."""
    req = urllib.request.Request(f"{d.url}/v1/jobs/{job_id}/{route}", data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"})
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def stored(d, table, job_id):
    """The (seq, doc) rows trainerd's store holds for the job in `table`, by seq."""
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    try:
        return db.execute(f"SELECT seq, doc FROM {table} WHERE job_id = ? ORDER BY seq", (job_id,)).fetchall()
    finally:
        db.close()


def job_identity(d, standin_behaviour, tmp_path, setup_basics):
    """Starts a stand-in run that waits QUEUED; returns (run id, TRAINER_JOB_ID, TRAINER_JOB_TOKEN)."""
    env_file = tmp_path / "job-env.json"
    standin_behaviour(queueSeconds=60, envFile=str(env_file))
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan()), 201)["runId"]
    d.wait_phase(run_id, "QUEUED")
    wait_for(lambda: env_file.exists() and env_file.stat().st_size > 0, timeout=30, what="the job's environment")
    env = json.loads(env_file.read_text())
    assert env["TRAINER_JOB_ID"] == f"{run_id}-1"
    assert len(env["TRAINER_JOB_TOKEN"]) == 64
    return run_id, env["TRAINER_JOB_ID"], env["TRAINER_JOB_TOKEN"]


def test_posting_the_same_events_twice_changes_nothing(start_trainerd, standin_behaviour, tmp_path, setup_basics):
    d = start_trainerd()
    run_id, job_id, token = job_identity(d, standin_behaviour, tmp_path, setup_basics)

    status, answer = post_as_job(d, job_id, token, "events", {"events": [{"seq": 1, "event": STEP}]})
    assert (status, answer) == (200, {"received": 1, "stored": 1})
    # The same seq again, even with other content: nothing changes.
    again = dict(STEP, loss=9.5)
    status, answer = post_as_job(d, job_id, token, "events", {"events": [{"seq": 1, "event": again}]})
    assert (status, answer) == (200, {"received": 1, "stored": 0})

    run = d.wait_phase(run_id, "TRAINING", timeout=30)  # the posted step was applied
    assert run["latest"]["loss"] == 0.5
    metrics = d.ok(d.get(f"/v1/runs/{run_id}/metrics"))
    steps = metrics.get("steps", metrics.get("metrics"))
    assert [(m["step"], m["loss"]) for m in steps] == [(1, 0.5)]
    assert [seq for seq, _ in stored(d, "job_events", job_id)] == [1]
    assert json.loads(stored(d, "job_events", job_id)[0][1])["loss"] == 0.5

    # Log lines likewise.
    lines = {"lines": [{"seq": 1, "text": "hello from the job"}, {"seq": 2, "text": "second line"}]}
    assert post_as_job(d, job_id, token, "logs", lines) == (200, {"received": 2, "stored": 2})
    assert post_as_job(d, job_id, token, "logs", lines) == (200, {"received": 2, "stored": 0})
    assert [text for _, text in stored(d, "job_logs", job_id)] == ["hello from the job", "second line"]
    d.ok(d.post(f"/v1/runs/{run_id}/cancel"))


def test_a_wrong_token_or_an_unknown_attempt_is_refused_and_changes_nothing(start_trainerd, standin_behaviour,
                                                                            tmp_path, setup_basics):
    d = start_trainerd()
    run_id, job_id, token = job_identity(d, standin_behaviour, tmp_path, setup_basics)
    body = {"events": [{"seq": 1, "event": STEP}]}

    status, answer = post_as_job(d, job_id, "0" * 64, "events", body)
    assert status == 403, answer
    assert "the token does not match" in answer["error"]["message"] and job_id in answer["error"]["message"]
    status, answer = post_as_job(d, job_id, "", "logs", {"lines": [{"seq": 1, "text": "x"}]})
    assert status == 403, answer
    status, answer = post_as_job(d, f"{run_id}-7", token, "events", body)  # another attempt's id
    assert status == 404, answer
    assert "no such attempt" in answer["error"]["message"]
    # A malformed post by the right job is a 400 naming the field.
    status, answer = post_as_job(d, job_id, token, "events", {"events": [{"seq": 0, "event": STEP}]})
    assert status == 400 and answer["error"]["field"] == "body.events[0].seq", answer

    assert stored(d, "job_events", job_id) == [] and stored(d, "job_logs", job_id) == []
    time.sleep(0.5)  # a pass of the driver: the run is still waiting for its job
    run = d.run(run_id)
    assert run["phase"] == "QUEUED" and "loss" not in run.get("latest", {})
    d.ok(d.post(f"/v1/runs/{run_id}/cancel"))


def test_a_real_job_posts_its_events_and_log(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan(steps=3)), 201)["runId"]
    run = d.wait_phase(run_id, "COMPLETED", timeout=300)
    job_id = f"{run_id}-1"
    events = stored(d, "job_events", job_id)
    file_lines = (d.data_dir / "runs" / run_id / "attempt-1" / "events.jsonl").read_text().splitlines()
    # Every event was posted, numbered as the file's lines are.
    assert [seq for seq, _ in events] == list(range(1, len(file_lines) + 1))
    assert [json.loads(doc) for _, doc in events] == [json.loads(line) for line in file_lines]
    assert json.loads(events[0][1])["type"] == "hello" and json.loads(events[-1][1])["type"] == "completed"
    log = [text for _, text in stored(d, "job_logs", job_id)]
    assert any(line.startswith("step 3/3") for line in log), log
    assert run["progress"]["step"] == 3


def test_a_job_that_cannot_reach_trainerd_delivers_once_it_is_back(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan(steps=3)), 201)["runId"]
    port = d.url.rsplit(":", 1)[1]
    d.wait_phase(run_id, ["QUEUED", "PREPARING", "TRAINING"], timeout=60)
    d.kill(signal.SIGKILL)  # the job runs on without trainerd
    events_file = d.data_dir / "runs" / run_id / "attempt-1" / "events.jsonl"
    wait_for(lambda: events_file.exists() and '"type":"step"' in events_file.read_text(), timeout=120,
             what="a step the job could not post")
    d.start(port=int(port))  # the same port: the job's retries reach it
    run = d.wait_phase(run_id, "COMPLETED", timeout=120)
    job_id = f"{run_id}-1"
    file_lines = events_file.read_text().splitlines()
    assert [seq for seq, _ in stored(d, "job_events", job_id)] == list(range(1, len(file_lines) + 1))
    log = [text for _, text in stored(d, "job_logs", job_id)]
    assert any("cannot post to" in line and "retrying" in line for line in log), log
    assert run["progress"]["step"] == 3
