"""Datasets are content-addressed; names are movable aliases; runs keep the hash they resolved."""
import json

from service_helpers import CHAT_ROWS, jsonl, plan


def test_the_same_rows_registered_twice_give_one_hash(start_trainerd):
    d = start_trainerd()
    a = d.post("/v1/datasets", {"name": "first", "rows": jsonl(CHAT_ROWS)})
    # Same rows, different whitespace: the same content.
    respaced = "\n".join(json.dumps(r, indent=None, separators=(", ", " : ")) for r in CHAT_ROWS) + "\n\n"
    b = d.post("/v1/datasets", {"name": "second", "rows": respaced})
    c = d.post("/v1/datasets", {"rows": jsonl(CHAT_ROWS)})
    assert a.status == 201 and b.status == 200 and c.status == 200
    assert a.json["hash"] == b.json["hash"] == c.json["hash"]
    assert sorted(c.json["names"]) == ["first", "second"]
    listed = d.ok(d.get("/v1/datasets"), 200)["datasets"]
    assert len(listed) == 1 and listed[0]["rows"] == len(CHAT_ROWS)
    assert d.ok(d.get(f"/v1/datasets/{a.json['hash'][:10]}"), 200)["hash"] == a.json["hash"]
    assert d.ok(d.get("/v1/datasets/second"), 200)["hash"] == a.json["hash"]


def test_a_rows_key_order_is_kept(start_trainerd):
    # A chat template renders a tool schema's keys in their order (as transformers does): the
    # stored rows keep the order they were given in, and another order is other content.
    d = start_trainerd()
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]
    row = {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "ok"}], "tools": tools}
    a = d.ok(d.post("/v1/datasets", {"name": "given", "rows": json.dumps(row) + "\n"}), 201)
    stored = (d.data_dir / "datasets" / (a["hash"] + ".jsonl")).read_text()
    assert stored == json.dumps(row, separators=(",", ":")) + "\n"
    reordered = dict(row, tools=[{"function": tools[0]["function"], "type": "function"}])
    b = d.ok(d.post("/v1/datasets", {"name": "reordered", "rows": json.dumps(reordered) + "\n"}), 201)
    assert b["hash"] != a["hash"]


def test_moving_an_alias_does_not_change_a_run_that_resolved_it(start_trainerd, setup_basics, standin_behaviour):
    standin_behaviour(steps=200, stepSeconds=0.05)
    d = start_trainerd()
    _, first = setup_basics(d)
    run = d.ok(d.post("/v1/runs", plan()), 201)
    moved = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS[:4])}), 201)
    assert moved["hash"] != first["hash"]
    assert d.ok(d.get("/v1/datasets/train"), 200)["hash"] == moved["hash"]
    got = d.run(run["runId"])
    assert got["dataset"]["hash"] == first["hash"] and got["plan"]["config"]["dataset"] == first["hash"]
    training = d.wait_phase(run["runId"], "TRAINING")
    attempt_plan = json.loads((d.data_dir / "runs" / run["runId"] / "attempt-1" / "plan.json").read_text())
    assert attempt_plan["config"]["dataset"].endswith(first["hash"] + ".jsonl")
    assert training["settingsSha"] == run["settingsSha"]
    second = d.ok(d.post("/v1/runs", plan()), 201)
    assert second["dataset"]["hash"] == moved["hash"] and second["settingsSha"] != run["settingsSha"]
    for r in (run, second):
        d.ok(d.post(f"/v1/runs/{r['runId']}/cancel"), 202)
        d.wait_phase(r["runId"], "CANCELLED")
