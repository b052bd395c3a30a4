"""The audit log and the request limits (docs/security.md, "Audit log" and "Request limits"),
through the real CLI and HTTP against a real trainerd:

- a write appears in the audit log with who sent it (the token's id and name), from where, the
  route, its object and workload, and how it was answered: a workload created by an admin, a run
  cancelled by a submit token, a write refused for want of the role (403) and one without a token
  (401); a GET does not appear;
- `trainer audit` prints the log as a table and, with -o json, as JSON lines; --token keeps one
  token's entries; a read token is refused it; no token's secret appears in the log nor in the
  store's rows;
- with a low configured rate, a burst of requests by one token gets 429 with Retry-After (and the
  CLI says so) while another token is still served;
- with a low configured rate per workload, requests of two tokens on one workload get 429 while
  another workload is still served;
- long polls over a token's cap get 429 with Retry-After while another token's poll is taken;
- a store that refuses audit entries (an SQLite trigger on the real store) leaves the writes
  answered, logs a warning naming the request, and counts each refusal on /metrics
  (trainer_audit_write_failures_total).
"""
from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import threading

import pytest

from auth import call_as, token_for
from conftest import ServerUnderTest, setup_basics
from service_helpers import BUILD, STANDIN_JOB, kill_jobs_under, plan
from waiting import wait_for

WORKLOAD = "audited"


def call(url: str, method: str, path: str, token: str | None, body=None, timeout: float = 60):
    """(status, headers, parsed JSON or raw text) of one request with exactly `token`."""
    return call_as(url, method, path, token, body, timeout)


def trainer(url: str, *args, token: str | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("TRAINER_TOKEN", None)
    if token:
        env["TRAINER_TOKEN"] = token
    return subprocess.run([str(BUILD / "apps" / "trainer"), "--trainer-url", url, *args], capture_output=True,
                          text=True, env=env, timeout=120)


def start(tmp_path, tiny_model, name: str, limits: dict) -> ServerUnderTest:
    standin = tmp_path / f"{name}-standin.json"
    standin.write_text(json.dumps({"queueSeconds": 3600}))  # runs stay QUEUED, their events quiet
    config = {"baseModels": [{"name": "tiny/qwen3", "path": str(tiny_model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
              "limits": {"cancelGraceSeconds": 2, **limits},
              "jobBinary": str(STANDIN_JOB)}
    return ServerUnderTest(tmp_path / name, config, env={"TRAINER_STANDIN_FILE": str(standin)})


@pytest.fixture
def servers(tmp_path, tiny_model):
    started: list[ServerUnderTest] = []

    def make(name: str, limits: dict | None = None) -> ServerUnderTest:
        d = start(tmp_path, tiny_model, name, limits or {})
        started.append(d)
        return d.start()

    yield make
    for d in started:
        d.kill()
        kill_jobs_under(d.data_dir)


def make_token(url: str, admin: str, name: str, roles: list[str], workloads=None) -> dict:
    body = {"name": name, "roles": roles}
    if workloads:
        body["workloads"] = workloads
    status, _, doc = call(url, "POST", "/v1/tokens", admin, body)
    assert status == 201, doc
    return doc


def audit_lines(url: str, *args, token: str | None = None) -> list[dict]:
    out = trainer(url, "audit", "-o", "json", *args, token=token)
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines() if line.strip()]


def test_writes_are_audited_with_who_what_and_from_and_reads_are_not(servers):
    d = servers("audit")
    url = d.url
    admin = token_for(url)
    setup_basics(d, WORKLOAD)
    workload_id = d.ok(d.get(f"/v1/workloads/{WORKLOAD}"))["id"]
    alice = make_token(url, admin, "alice", ["submit"], [WORKLOAD])
    reader = make_token(url, admin, "reader", ["read"])

    status, _, run = call(url, "POST", "/v1/runs", alice["token"], plan(workload=WORKLOAD))
    assert status == 201, run
    run_id = run["runId"]
    # A write its token's role does not cover is refused, and recorded so.
    out = trainer(url, "runs", "cancel", run_id, "--force", token=reader["token"])
    assert out.returncode != 0 and "needs the submit role" in out.stderr, out.stderr
    # One without a token is refused, and recorded as anonymous.
    assert call(url, "POST", f"/v1/runs/{run_id}/cancel", None, {})[0] == 401
    # The submit token cancels its run through the CLI.
    out = trainer(url, "runs", "cancel", run_id, "--force", token=alice["token"])
    assert out.returncode == 0, out.stderr
    # Reads are not recorded.
    assert call(url, "GET", f"/v1/runs/{run_id}", alice["token"])[0] == 200
    assert trainer(url, "runs", "list", token=reader["token"]).returncode == 0

    entries = audit_lines(url)  # the local admin token trainerd wrote, as the CLI finds it
    assert entries and all(e["method"] != "GET" for e in entries), entries

    created = [e for e in entries if e["route"] == "/v1/workloads" and e["method"] == "POST"]
    assert len(created) == 1, entries
    assert created[0]["status"] == 201 and created[0]["workload"] == workload_id
    assert created[0]["workloadName"] == WORKLOAD and created[0]["from"] == "127.0.0.1"
    assert "admin" in created[0]["roles"]

    submitted = [e for e in entries if e["route"] == "/v1/runs" and e["method"] == "POST"]
    assert [(e["tokenId"], e["tokenName"], e["status"], e["target"]) for e in submitted] == \
        [(alice["tokenId"], "alice", 201, run_id)]

    cancels = [e for e in entries if e["route"] == "/v1/runs/{ref}/cancel"]
    assert [(e["tokenName"], e["status"], e.get("error")) for e in cancels] == \
        [("reader", 403, "permission_denied"), ("", 401, "unauthenticated"), ("alice", 202, None)], cancels
    done = cancels[-1]
    assert done["tokenId"] == alice["tokenId"] and done["from"] == "127.0.0.1"
    assert done["path"] == f"/v1/runs/{run_id}/cancel" and done["target"] == run_id
    assert done["workload"] == workload_id and done["workloadName"] == WORKLOAD
    assert cancels[1]["tokenId"] == ""  # anonymous

    # --token keeps one token's entries, by its name or its id; --workload one workload's.
    assert {e["tokenName"] for e in audit_lines(url, "--token", "alice")} == {"alice"}
    assert len(audit_lines(url, "--token", alice["tokenId"])) == 2
    assert {e["workload"] for e in audit_lines(url, "--workload", WORKLOAD)} == {workload_id}
    assert audit_lines(url, "--since", "1h")  # a duration reaches back from now
    assert audit_lines(url, "--since", "2000-01-01T00:00:00Z", "--limit", "2") == entries[-2:]

    # The table: who, from where, what, on which object, how it ended.
    table = trainer(url, "audit", "--token", "alice")
    assert table.returncode == 0, table.stderr
    lines = table.stdout.splitlines()
    assert lines[0].split() == ["TIME", "WHO", "FROM", "ACTION", "TARGET", "STATUS"]
    cancel_row = next(line for line in lines if "/cancel" in line)
    assert f"alice ({alice['tokenId']})" in cancel_row and "127.0.0.1" in cancel_row
    assert run_id in cancel_row and cancel_row.rstrip().endswith("202")

    # The audit log is the admin's: a read token is refused it.
    out = trainer(url, "audit", token=reader["token"])
    assert out.returncode != 0 and "needs the admin role" in out.stderr, out.stderr
    assert call(url, "GET", "/v1/audit", alice["token"])[0] == 403
    # Bad filters are named.
    status, _, err = call(url, "GET", "/v1/audit?since=yesterday", admin)
    assert status == 400 and err["error"]["field"] == "since", err
    status, _, err = call(url, "GET", "/v1/audit?limit=0", admin)
    assert status == 400 and err["error"]["field"] == "limit", err
    out = trainer(url, "audit", "--since", "last tuesday")
    assert out.returncode == 2 and "--since" in out.stderr, out.stderr

    # No secret is in the log, nor in the store's rows.
    secrets = [admin, alice["token"], reader["token"]]
    every = trainer(url, "audit", "-o", "json", "--limit", "10000").stdout
    assert every and not any(s in every for s in secrets)
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    try:
        rows = [doc for (doc,) in db.execute("SELECT doc FROM audit_log")]
    finally:
        db.close()
    assert len(rows) >= len(entries)
    assert not any(s in row for s in secrets for row in rows)


def test_a_token_over_its_rate_gets_429_with_retry_after_while_another_is_served(servers):
    d = servers("rate", {"requestsPerSecond": 1, "requestBurst": 2})
    url = d.url
    admin = token_for(url)
    fast = make_token(url, admin, "fast", ["read"])["token"]
    calm = make_token(url, admin, "calm", ["read"])["token"]

    def refused():
        status, headers, body = call(url, "GET", "/v1/workloads", fast)
        return (status, headers, body) if status == 429 else None

    status, headers, body = wait_for(refused, timeout=120, what="a 429 for a token over its rate", interval=0)
    assert int(headers["Retry-After"]) >= 1
    assert body["error"]["code"] == "resource_exhausted"
    assert "limits.requestsPerSecond" in body["error"]["message"], body
    # Another token has a bucket of its own.
    assert call(url, "GET", "/v1/workloads", calm)[0] == 200
    # The public routes are not counted: the service's info is answered whatever the rate.
    assert call(url, "GET", "/v1/info", None)[0] == 200

    # The CLI says what happened.
    def cli_refused():
        for _ in range(3):
            call(url, "GET", "/v1/workloads", fast)
        out = trainer(url, "workloads", "list", token=fast)
        return out if out.returncode != 0 else None

    out = wait_for(cli_refused, timeout=120, what="the CLI refused over the rate", interval=0)
    assert "too many requests (HTTP 429)" in out.stderr and "limits.requestsPerSecond" in out.stderr, out.stderr


def test_a_workload_over_its_rate_gets_429_while_another_workload_is_served(servers):
    d = servers("workload-rate", {"workloadRequestsPerSecond": 1, "workloadRequestBurst": 2})
    url = d.url
    admin = token_for(url)
    busy, quiet = "busy", "quiet"
    for name in (busy, quiet):
        d.ok(d.post("/v1/workloads", {"name": name}), 201)
    one = make_token(url, admin, "one", ["read"])["token"]
    two = make_token(url, admin, "two", ["read"])["token"]

    def refused():
        # Two tokens share the workload's bucket.
        for token in (one, two):
            status, headers, body = call(url, "GET", f"/v1/workloads/{busy}", token)
            if status == 429:
                return status, headers, body
        return None

    status, headers, body = wait_for(refused, timeout=120, what="a 429 for a workload over its rate", interval=0)
    assert int(headers["Retry-After"]) >= 1
    assert "workload busy" in body["error"]["message"], body
    assert "limits.workloadRequestsPerSecond" in body["error"]["message"], body
    # Another workload has a bucket of its own, and requests that name none are not counted.
    assert call(url, "GET", f"/v1/workloads/{quiet}", one)[0] == 200
    assert call(url, "GET", "/v1/workloads", two)[0] == 200


def test_long_polls_over_a_tokens_cap_get_429_while_another_tokens_are_taken(servers):
    d = servers("polls", {"longPollsPerToken": 2})
    url = d.url
    admin = token_for(url)
    setup_basics(d, WORKLOAD)
    run_id = d.ok(d.post("/v1/runs", plan(workload=WORKLOAD)), 201)["runId"]
    d.wait_phase(run_id, "QUEUED")
    follower = make_token(url, admin, "follower", ["read"])["token"]
    other = make_token(url, admin, "other", ["read"])["token"]
    events = call(url, "GET", f"/v1/runs/{run_id}/events", follower)[2]["events"]
    after = max((e["seq"] for e in events), default=0)
    poll = f"/v1/runs/{run_id}/events?after={after}&waitSeconds=60"

    held = []  # the two polls the cap allows, parked until the run changes

    def hold():
        # A probe below may take a slot for its second: this poll then tries again until it is held.
        while True:
            answer = call(url, "GET", poll, follower, timeout=120)
            if answer[0] != 429:
                held.append(answer)
                return
            threading.Event().wait(0.2)

    for _ in range(2):
        threading.Thread(target=hold, daemon=True).start()

    def refused():
        status, headers, body = call(url, "GET", f"/v1/runs/{run_id}/events?after={after}&waitSeconds=1", follower)
        return (status, headers, body) if status == 429 else None

    status, headers, body = wait_for(refused, timeout=60, what="a third long poll refused", interval=0.05)
    assert int(headers["Retry-After"]) >= 1
    assert "limits.longPollsPerToken" in body["error"]["message"], body
    # Another token's poll is taken (it answers when its wait ends, with no new events).
    status, _, answer = call(url, "GET", f"/v1/runs/{run_id}/events?after={after}&waitSeconds=1", other)
    assert status == 200 and answer["events"] == [], answer
    # A change ends the held polls; their slots are given back and the token may poll again.
    assert call(url, "POST", f"/v1/runs/{run_id}/cancel", admin, {})[0] == 202
    wait_for(lambda: len(held) == 2, timeout=90, what="the held polls answered")
    assert [h[0] for h in held] == [200, 200], held
    # Once the run is over its events stop: a poll after the last one parks again, in a slot given back.
    d.wait_phase(run_id, "CANCELLED")
    latest = max(e["seq"] for e in call(url, "GET", f"/v1/runs/{run_id}/events?after={after}", follower)[2]["events"])
    status, _, answer = call(url, "GET", f"/v1/runs/{run_id}/events?after={latest}&waitSeconds=1", follower)
    assert status == 200, answer


def audit_write_failures(d: ServerUnderTest, admin: str) -> float:
    status, _, text = call(d.url, "GET", "/metrics", admin)
    assert status == 200, text
    line = next(x for x in text.splitlines() if x.startswith("trainer_audit_write_failures_total "))
    return float(line.split()[1])


def test_an_audit_entry_the_store_refuses_is_logged_and_counted(servers):
    d = servers("refusing")
    admin = token_for(d.url)
    assert audit_write_failures(d, admin) == 0
    db = sqlite3.connect(str(d.data_dir / "state.db"), timeout=30)
    try:
        db.execute("CREATE TRIGGER refuse_audit BEFORE INSERT ON audit_log "
                   "BEGIN SELECT RAISE(ABORT, 'the test refuses audit entries'); END")
        db.commit()
    finally:
        db.close()
    for name in ("first", "second"):
        status, _, doc = call(d.url, "POST", "/v1/workloads", admin, {"name": name})
        assert status == 201, doc  # the write itself is answered
    assert audit_write_failures(d, admin) == 2
    log = d.log()
    assert "warning: the audit log could not record POST /v1/workloads" in log, log[-2000:]
    assert "the test refuses audit entries" in log
    assert not any(e["route"] == "/v1/workloads" and e["method"] == "POST" for e in audit_lines(d.url, token=admin))


def test_a_bad_limit_is_refused_at_start_by_name(tmp_path, tiny_model):
    d = start(tmp_path, tiny_model, "bad", {"requestsPerSecond": -1})
    with pytest.raises(RuntimeError, match="limits.requestsPerSecond"):
        d.start()
    d = start(tmp_path, tiny_model, "bad2", {"longPollsPerToken": "many"})
    with pytest.raises(RuntimeError, match="limits.longPollsPerToken"):
        d.start()
