"""Bad input gets a 4xx whose JSON error names the problem, and the store is unchanged."""
import pytest

from service_helpers import CHAT_ROWS, jsonl, plan


def snapshot(d):
    return {path: d.ok(d.get(path), 200) for path in
            ("/v1/runs", "/v1/datasets", "/v1/workloads", "/v1/base-models", "/v1/capacity")}


@pytest.fixture
def ready(start_trainerd, setup_basics):
    d = start_trainerd()
    setup_basics(d)
    return d


def check(d, reply, status, code, field, *words):
    assert reply.status == status, reply
    err = reply.json["error"]
    assert err["code"] == code, err
    if field is not None:
        assert err.get("field") == field, err
    for w in words:
        assert w in err["message"], err


def test_malformed_json(ready):
    d = ready
    before = snapshot(d)
    for path in ("/v1/runs", "/v1/workloads", "/v1/datasets", "/v1/base-models/select"):
        check(d, d.post(path, raw=b'{"kind": "run", '), 400, "invalid_argument", "body", "not valid JSON")
    check(d, d.post("/v1/runs", raw=b"[1, 2]"), 400, "invalid_argument", "body", "must be a JSON object")
    check(d, d.post("/v1/runs", raw=b""), 400, "invalid_argument", "body", "empty")
    assert snapshot(d) == before


def test_unknown_fields_are_refused_by_name(ready):
    d = ready
    before = snapshot(d)
    bad = plan()
    bad["config"]["hyperparams"]["lora"]["rnak"] = 8
    check(d, d.post("/v1/runs", bad), 400, "invalid_argument", "config.hyperparams.lora.rnak", "unknown field")
    check(d, d.post("/v1/runs", plan(colour="red")), 400, "invalid_argument", "colour", "unknown field")
    check(d, d.post("/v1/workloads", {"name": "x1", "quotaa": 1}), 400, "invalid_argument", "quotaa")
    check(d, d.post("/v1/datasets", {"rows": jsonl(CHAT_ROWS), "nam": "x"}), 400, "invalid_argument", "nam")
    check(d, d.request("PATCH", "/v1/workloads/triage", {"title": "x"}), 400, "invalid_argument", "title")
    bad = plan()
    bad["config"]["hyperparams"]["lora"]["rank"] = -1
    check(d, d.post("/v1/runs", bad), 400, "invalid_argument", "config.hyperparams.lora.rank")
    assert snapshot(d) == before


def test_unknown_base_model_dataset_or_workload(ready):
    d = ready
    before = snapshot(d)
    check(d, d.post("/v1/runs", plan(baseModel="meta/unknown")), 404, "not_found", "baseModel",
          "'meta/unknown' is not one of the deployment's base models", "tiny/qwen3")
    check(d, d.post("/v1/runs", plan(dataset="nope")), 404, "not_found", "config.dataset", "'nope'")
    check(d, d.post("/v1/runs", plan(workload="ghost")), 404, "not_found", "workload", "'ghost'")
    check(d, d.post("/v1/base-models/select", {"name": "meta/unknown"}), 404, "not_found", "name")
    check(d, d.get("/v1/runs/0123456789abcdef"), 404, "not_found", "run")
    check(d, d.get("/v1/datasets/nope"), 404, "not_found", "dataset")
    check(d, d.get("/v1/runs?phase=RUNNING"), 400, "invalid_argument", "phase", "TRAINING")
    check(d, d.get("/v1/runs?limit=abc"), 400, "invalid_argument", "limit")
    assert snapshot(d) == before


@pytest.mark.parametrize("name", ["../etc", "..", "a/../../b", "%2e%2e%2f", "....//", "/abs/path", "UPPER",
                                  "a" * 65, "-lead", "deadbeef01"])
def test_bad_workload_names(ready, name):
    d = ready
    before = snapshot(d)
    r = d.post("/v1/workloads", {"name": name})
    check(d, r, 400, "invalid_argument", "name")
    assert snapshot(d) == before


@pytest.mark.parametrize("name", ["../escape", "a/b", "..", "x/../../y", "%2e%2e%2f", "/etc/passwd"])
def test_path_traversal_in_dataset_names(ready, name):
    d = ready
    before = snapshot(d)
    check(d, d.post("/v1/datasets", {"name": name, "rows": jsonl(CHAT_ROWS)}), 400, "invalid_argument", "name")
    assert snapshot(d) == before
    files = sorted(p.name for p in (d.data_dir / "datasets").iterdir())
    assert len(files) == 1  # only the dataset setup registered
    # Traversal in a path segment finds nothing and touches nothing.
    r = d.get("/v1/datasets/..%2f..%2fstate.db")
    assert r.status in (400, 404), r


def test_bad_dataset_rows_name_the_line(ready):
    d = ready
    before = snapshot(d)
    rows = jsonl(CHAT_ROWS[:2]) + '{"messages": [{"role": "user", "content": "no answer"}]}\n'
    check(d, d.post("/v1/datasets", {"rows": rows}), 400, "invalid_argument", "rows", "line 3", "assistant")
    check(d, d.post("/v1/datasets", {"rows": "not json\n"}), 400, "invalid_argument", "rows", "line 1")
    check(d, d.post("/v1/datasets", {"rows": ""}), 400, "invalid_argument", "rows")
    assert snapshot(d) == before


def test_oversized_bodies(ready):
    d = ready
    before = snapshot(d)
    huge = {"kind": "run", "description": "x" * 70000}  # the test config allows 65536 bytes
    check(d, d.post("/v1/runs", huge), 413, "resource_exhausted", "body", "over the limit")
    rows = jsonl(CHAT_ROWS) * 3000  # ~2 MiB; datasets may be 1 MiB here
    r = d.post("/v1/datasets", {"name": "big", "rows": rows})
    assert r.status == 413, r
    assert r.json["error"]["code"] == "resource_exhausted"
    assert snapshot(d) == before
