"""Who may call which route (docs/security.md), against a real trainerd:

- the role table of docs/security.md is the one the server checks (`trainerd --print-roles`), and
  every route of docs/openapi.yaml has a rule in it;
- a matrix over every route of docs/openapi.yaml and the tokens {none, read, submit on workload A,
  submit on B, admin, control, revoked, expired}: each answer is the one the table gives (401
  without a live token, 403 without the role or the workload scope, 404 for an object of another
  workload, the route's own answer otherwise);
- an object of workload B is 404 to a token of A, with the same answer as an id that does not exist;
- the fault tour of issue 32: without credentials a client cancelled another workload's run, set
  its quota to 0 and renamed it; now each is refused and nothing changes;
- a job attempt's token cannot post events to, or reserve a snapshot for, another run;
- `trainerd --host 0.0.0.0` without TLS refuses to start, naming the setting.

Requests here go through an opener without the tests' token handler (auth.py), so each sends
exactly the token the case names.
"""
from __future__ import annotations

import datetime
import importlib.machinery
import importlib.util
import json
import pathlib
import re
import sqlite3
import subprocess

import pytest
import yaml

from auth import call_as, token_for
from conftest import ServerUnderTest, setup_basics
from service_helpers import BUILD, STANDIN_JOB, kill_jobs_under, plan

REPO = pathlib.Path(__file__).resolve().parents[3]

A, B = "wl-a", "wl-b"  # two workloads
MISSING = "zzzz"       # an id no object has (ids are hex)
T0 = 1_900_000_000.0   # the service's clock at start (TRAINER_TEST_CLOCK_FILE)


def gen_security_doc():
    """tools/gen-security-doc as a module (its file has no .py)."""
    loader = importlib.machinery.SourceFileLoader("gen_security_doc", str(REPO / "tools" / "gen-security-doc"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
    loader.exec_module(module)
    return module


def print_roles() -> dict:
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--print-roles"], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def shape(path: str) -> str:
    """A route's pattern with its placeholders unnamed (openapi's {id} is the server's {ref})."""
    return re.sub(r"\{[^}]+\}", "{}", path)


def call(url: str, method: str, path: str, token: str | None, body=None, timeout: float = 30) -> tuple[int, dict]:
    status, _, answer = call_as(url, method, path, token, body, timeout)
    return status, answer if isinstance(answer, (dict, list)) else {}


def test_the_documented_role_table_is_the_servers():
    roles = print_roles()
    doc = (REPO / "docs" / "security.md").read_text()
    assert gen_security_doc().render(doc, roles) == doc, "run tools/gen-security-doc"


def test_every_openapi_route_has_a_rule():
    rules = {(r["method"], shape(r["pattern"])) for r in print_roles()["routes"]}
    spec = yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text())
    missing = [f"{m.upper()} {p}" for p, item in spec["paths"].items() for m in item
               if m in ("get", "post", "put", "patch", "delete") and (m.upper(), shape(p)) not in rules]
    assert missing == []


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """A trainerd on a clock the test moves, with workloads A and B, a run in each (held QUEUED by
    the stand-in job; two devices, so both have a job), and a token of each kind."""
    from models import make_tiny_model
    tmp = tmp_path_factory.mktemp("roles")
    model = make_tiny_model(tmp / "tiny-qwen3", arch="qwen3", tokenizer="qwen3", seed=0)
    clock = tmp / "clock"
    clock.write_text(str(T0))
    standin = tmp / "standin.json"
    standin.write_text(json.dumps({"queueSeconds": 3600}))
    config = {"baseModels": [{"name": "tiny/qwen3", "path": str(model)}],
              "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}],
              "limits": {"cancelGraceSeconds": 2, "maxRequestBytes": 1 << 20, "maxDatasetBytes": 4 << 20},
              "jobBinary": str(STANDIN_JOB)}
    d = ServerUnderTest(tmp / "data", config, env={"TRAINER_STANDIN_FILE": str(standin),
                                                   "TRAINER_TEST_CLOCK_FILE": str(clock)}).start()
    try:
        setup_basics(d, A)
        d.ok(d.post("/v1/workloads", {"name": B}), 201)
        runs = {w: d.ok(d.post("/v1/runs", plan(workload=w)), 201)["runId"] for w in (A, B)}
        for run_id in runs.values():
            d.wait_phase(run_id, "QUEUED")
        admin = token_for(d.url)
        assert admin, "trainerd wrote no local token for its address"

        def make(name, roles, workloads=None, **extra):
            body = {"name": name, "roles": roles, **extra}
            if workloads:
                body["workloads"] = workloads
            status, doc = call(d.url, "POST", "/v1/tokens", admin, body)
            assert status == 201, doc
            return doc

        tokens = {
            "none": None,
            "read": make("reader", ["read"])["token"],
            "submit-a": make("alice", ["submit"], [A])["token"],
            "submit-b": make("bob", ["submit"], [B])["token"],
            "admin": make("admin", ["admin"])["token"],
            "control": make("operator", ["control"])["token"],
        }
        revoked = make("gone", ["admin"])
        assert call(d.url, "POST", f"/v1/tokens/{revoked['tokenId']}/revoke", admin)[0] == 200
        tokens["revoked"] = revoked["token"]
        expires = datetime.datetime.fromtimestamp(T0 + 1, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        tokens["expired"] = make("brief", ["admin"], expiresAt=expires)["token"]
        clock.write_text(str(T0 + 2))  # past its expiry
        yield {"d": d, "runs": runs, "tokens": tokens, "admin": admin}
    finally:
        d.kill()
        kill_jobs_under(d.data_dir)


# What each kind of token holds: its roles and its workloads (None: every workload); revoked,
# expired and none are refused before their roles count.
KINDS = {"read": (["read"], None), "submit-a": (["submit"], A), "submit-b": (["submit"], B),
         "admin": (["admin"], None), "control": (["control"], None)}
ORDER = {"read": 1, "submit": 2, "admin": 3}


def has_role(roles: list[str], need: str) -> bool:
    for mine in roles:
        if mine == need or (need == "read" and mine == "control"):
            return True
        if need in ORDER and mine in ORDER and ORDER[mine] >= ORDER[need]:
            return True
    return False


def expected(rule: dict, kind: str) -> str:
    """What the table says a token of `kind` gets on `rule`'s route, for a request that touches
    workload A's objects: "401", "403", "404" (hidden), or "pass" (the route's own answer)."""
    need = rule["role"].split()[0]  # "read or job": a job's credentials too (none are sent here)
    if need in ("public", "job"):
        return "pass"
    if kind in ("none", "revoked", "expired"):
        return "401"
    roles, workload = KINDS[kind]
    if not has_role(roles, need):
        return "403"
    if workload is None or rule["scope"] == "none":
        return "pass"
    if rule["scope"] == "all":
        return "403"
    if rule["scope"] in ("workload", "run", "body", "query", "list"):
        return "pass" if workload == A else "404"
    return "404"  # snapshot, evaluation, endpoint, ...: the request names none that exists


def concrete(pattern: str, rule: dict, run_a: str) -> str:
    """The route's path for a request that touches workload A (its run for run routes)."""
    first = {"workload": A, "run": run_a}.get(rule["scope"], MISSING)
    if pattern.startswith("/v1/datasets/") or pattern.startswith("/v1/dataset-names/"):
        first = "train"
    if pattern.startswith("/v1/base-models/{"):
        first = "tiny/qwen3"
    parts, seen_first = [], False
    for seg in pattern.split("/"):
        if seg.startswith("{"):
            value = "base" if seg == "{which}" else (MISSING if seen_first else first)
            seen_first = True
            parts.append(value)
        else:
            parts.append(seg)
    path = "/".join(parts)
    if rule["scope"] in ("query", "list"):
        path += f"?workload={A}"
    if pattern == "/v1/runs/{ref}/events":
        path += "?waitSeconds=0"
    return path


def test_an_object_of_another_workload_is_404_as_a_missing_one(service):
    d, tokens, runs = service["d"], service["tokens"], service["runs"]
    hidden = call(d.url, "GET", f"/v1/runs/{runs[B]}", tokens["submit-a"])
    missing = call(d.url, "GET", f"/v1/runs/{MISSING}", tokens["submit-a"])
    assert hidden[0] == missing[0] == 404
    assert hidden[1]["error"]["message"] == f"run '{runs[B]}' not found"
    assert missing[1]["error"]["message"] == f"run '{MISSING}' not found"
    # Its own workload's run is answered; a list names the workload it reads.
    assert call(d.url, "GET", f"/v1/runs/{runs[A]}", tokens["submit-a"])[0] == 200
    # A list that names no workload answers a limited token its own workloads' items only.
    status, answer = call(d.url, "GET", "/v1/runs", tokens["submit-a"])
    assert status == 200 and [r["runId"] for r in answer["runs"]] == [runs[A]], answer
    status, answer = call(d.url, "GET", "/v1/workloads", tokens["submit-a"])
    assert status == 200 and [w["name"] for w in answer["workloads"]] == [A], answer
    status, answer = call(d.url, "GET", "/v1/workloads", tokens["admin"])
    assert status == 200 and {A, B} <= {w["name"] for w in answer["workloads"]}, answer
    status, answer = call(d.url, "GET", f"/v1/runs?workload={A}", tokens["submit-a"])
    assert status == 200 and [r["runId"] for r in answer["runs"]] == [runs[A]], answer
    assert call(d.url, "GET", f"/v1/runs?workload={B}", tokens["submit-a"])[0] == 404
    # A run submitted into another workload is refused as if that workload did not exist.
    status, answer = call(d.url, "POST", "/v1/runs", tokens["submit-a"], plan(workload=B))
    assert status == 404 and answer["error"]["message"] == f"workload '{B}' not found", answer


def test_a_limited_tokens_pipelines_list_holds_only_pipelines_of_its_workloads(service):
    """GET /v1/pipelines names no workload: a limited token gets the pipelines every stage of which
    is of its workloads, the others left out as if they did not exist; ?workload= filters as well."""
    d, tokens, admin = service["d"], service["tokens"], service["admin"]

    def train(name, workload):
        stage = {k: v for k, v in plan(workload=workload).items() if k != "kind"}
        return {"name": name, "type": "train", **stage}

    made = {}
    for label, stages in (("a", [train("t", A)]), ("b", [train("t", B)]), ("ab", [train("t", A), train("u", B)])):
        status, doc = call(d.url, "POST", "/v1/pipelines", admin, {"kind": "pipeline", "stages": stages})
        assert status == 201, doc
        made[label] = doc["pipelineId"]
        # Cancelled at once: listed all the same, and their runs hold no device.
        assert call(d.url, "POST", f"/v1/pipelines/{made[label]}/cancel", admin)[0] == 202
    mine = set(made.values())

    def listed(token, query=""):
        status, answer = call(d.url, "GET", "/v1/pipelines" + query, token)
        assert status == 200, answer
        return {p["pipelineId"] for p in answer["pipelines"]} & mine

    assert listed(admin) == mine
    assert listed(tokens["read"]) == mine
    assert listed(tokens["submit-a"]) == {made["a"]}
    assert listed(tokens["submit-b"]) == {made["b"]}
    assert listed(tokens["submit-a"], f"?workload={A}") == {made["a"]}
    assert call(d.url, "GET", f"/v1/pipelines?workload={B}", tokens["submit-a"])[0] == 404
    # One pipeline is still found by id only with a token on every workload.
    status, answer = call(d.url, "GET", f"/v1/pipelines/{made['a']}", tokens["submit-a"])
    assert status == 403 and "every workload" in answer["error"]["message"], answer
    # The distillations list is filtered the same way (none exist here: an empty list, not 403).
    status, answer = call(d.url, "GET", "/v1/distillations", tokens["submit-a"])
    assert status == 200 and answer["distillations"] == [], answer


def test_the_fault_tours_cross_workload_writes_are_refused_and_change_nothing(service):
    """Issue 32's fault tour: with no credentials a client cancelled another workload's run, set
    its quota to 0 and renamed it."""
    d, tokens, runs, admin = service["d"], service["tokens"], service["runs"], service["admin"]
    before = d.ok(d.get(f"/v1/workloads/{B}"), 200)
    # No credentials: 401 for each.
    for method, path, body in (("POST", f"/v1/runs/{runs[B]}/cancel", {}),
                               ("PATCH", f"/v1/workloads/{B}", {"quota": 0}),
                               ("PATCH", f"/v1/workloads/{B}", {"name": "taken-over"})):
        status, answer = call(d.url, method, path, None, body)
        assert status == 401 and answer["error"]["code"] == "unauthenticated", (path, answer)
    # A's submitter cannot reach B's run; an admin of A only cannot reach B's quota or name.
    assert call(d.url, "POST", f"/v1/runs/{runs[B]}/cancel", tokens["submit-a"], {})[0] == 404
    status, doc = call(d.url, "POST", "/v1/tokens", admin, {"name": "a-admin", "roles": ["admin"], "workloads": [A]})
    assert status == 201, doc
    for body in ({"quota": 0}, {"name": "taken-over"}):
        assert call(d.url, "PATCH", f"/v1/workloads/{B}", doc["token"], body)[0] == 404
    # A submitter has no admin role, even on its own workload.
    status, answer = call(d.url, "PATCH", f"/v1/workloads/{A}", tokens["submit-a"], {"quota": 0})
    assert status == 403 and "needs the admin role" in answer["error"]["message"], answer
    # Nothing changed.
    assert d.run(runs[B])["phase"] == "QUEUED"
    assert d.ok(d.get(f"/v1/workloads/{B}"), 200) == before


def job_credentials(d, run_id: str) -> dict:
    """The headers the run's current attempt sends (its id and token, read from the store)."""
    run = d.run(run_id)
    job_id = f"{run['runId']}-{run['attempt']}"
    db = sqlite3.connect(str(d.data_dir / "state.db"))
    try:
        row = db.execute("SELECT token FROM job_attempts WHERE job_id = ?", (job_id,)).fetchone()
    finally:
        db.close()
    assert row, f"no job attempt {job_id}"
    return {"X-Trainer-Job": job_id, "Authorization": f"Bearer {row[0]}"}


def raw_post(url: str, path: str, headers: dict, body: dict) -> tuple[int, dict]:
    status, _, answer = call_as(url, "POST", path, None, body, 30, headers)
    return status, answer


def test_a_jobs_token_cannot_post_events_to_or_reserve_a_snapshot_for_another_run(service):
    d, runs = service["d"], service["runs"]
    as_a, as_b = job_credentials(d, runs[A]), job_credentials(d, runs[B])
    event = {"events": [{"seq": 1, "event": {"type": "warning", "message": "from the wrong job"}}]}
    # A's token on B's job id: refused.
    status, answer = raw_post(d.url, f"/v1/jobs/{as_b['X-Trainer-Job']}/events",
                              {"Authorization": as_a["Authorization"]}, event)
    assert status == 403, answer
    # A's credentials reserving a snapshot of B's run: refused; B's own are not refused for who they are.
    reservation = {"snapshotId": "0" * 64, "attempt": 1, "step": 1, "epoch": 0,
                   "kinds": {"weights": {"manifestDigest": "0" * 64, "bytes": 1}}}
    status, answer = raw_post(d.url, f"/v1/runs/{runs[B]}/snapshots", as_a, reservation)
    assert status in (401, 403), answer
    assert "X-Trainer-Job" in answer["error"].get("field", "") or "attempt" in answer["error"]["message"], answer
    # An API token, even the admin's, is no job's token.
    status, answer = raw_post(d.url, f"/v1/jobs/{as_b['X-Trainer-Job']}/events",
                              {"Authorization": f"Bearer {service['admin']}"}, event)
    assert status == 403, answer
    # B's run saw no event from A.
    events = d.ok(d.get(f"/v1/runs/{runs[B]}/events?waitSeconds=0"), 200)
    assert all("from the wrong job" not in json.dumps(e) for e in events.get("events", [])), events


def test_trainerd_refuses_a_non_loopback_host_without_tls(tmp_path):
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--host", "0.0.0.0", "--port", "0",
                          "--data-dir", str(tmp_path / "data")], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out.stderr
    assert "--host 0.0.0.0 is not a loopback address" in out.stderr
    assert "--allow-plaintext-beyond-loopback" in out.stderr
    assert not (tmp_path / "data").exists()  # refused before anything was made


# Answers that never end while the run is QUEUED, or that act on the whole service's machines:
# their rule is checked for the refusals only.
NOT_PASSED = {("GET", "/v1/runs/{ref}/metrics/stream"), ("POST", "/v1/capacity/scan"),
              ("POST", "/v1/datasets/{ref}/measure")}


def test_every_route_answers_each_token_as_the_role_table_says(service):
    """Last in this file: the tokens allowed to act on workload A's run cancel and pause it."""
    d, tokens, run_a = service["d"], service["tokens"], service["runs"][A]
    rules = {(r["method"], shape(r["pattern"])): r for r in print_roles()["routes"]}
    spec = yaml.safe_load((REPO / "docs" / "openapi.yaml").read_text())
    checked, wrong = 0, []
    for path, item in spec["paths"].items():
        for method in ("get", "post", "put", "patch", "delete"):
            if method not in item:
                continue
            rule = rules[(method.upper(), shape(path))]
            url_path = concrete(rule["pattern"], rule, run_a)
            body = {"workload": A} if method in ("post", "put", "patch") else None
            for kind, token in tokens.items():
                want = expected(rule, kind)
                if want == "pass" and (rule["method"], rule["pattern"]) in NOT_PASSED:
                    continue
                status, answer = call(d.url, method.upper(), url_path, token, body)
                code = answer.get("error", {}).get("code") if isinstance(answer.get("error"), dict) else None
                ok = {"401": status == 401 and code == "unauthenticated",
                      "403": status == 403 and code == "permission_denied",
                      "404": status == 404 and code == "not_found",
                      "pass": code not in ("unauthenticated", "permission_denied")}[want]
                checked += 1
                if not ok:
                    wrong.append(f"{method.upper()} {url_path} as {kind}: want {want}, got {status} {answer}")
    assert wrong == [], "\n".join(wrong)
    assert checked > 500
    # Nothing reached workload B: its run is still QUEUED (A's was cancelled by its own tokens).
    assert d.run(service["runs"][B])["phase"] == "QUEUED"
