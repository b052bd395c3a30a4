"""Datasets through the API use the one validator the engine trains with."""
import json

from service_helpers import CHAT_ROWS, jsonl


def test_prompt_completion_and_tool_rows_are_accepted(start_trainerd):
    d = start_trainerd()
    rows = [
        {"prompt": "Classify: printer on fire", "completion": "urgent"},
        {"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}]},
        {"messages": [{"role": "user", "content": "weather?"},
                      {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "weather"}}]},
                      {"role": "tool", "content": "sunny"}, {"role": "assistant", "content": "Sunny."}],
         "tools": [{"type": "function", "function": {"name": "weather"}}]},
    ]
    ds = d.ok(d.post("/v1/datasets", {"name": "mixed", "rows": jsonl(rows)}), 201)
    assert ds["rows"] == 3


def test_every_bad_line_is_reported_by_line_and_field(start_trainerd):
    d = start_trainerd()
    bad = {"messages": [{"role": "user", "content": "no answer"}]}
    rows = jsonl(CHAT_ROWS[:1] + [bad] * 22 + [{"messages": [{"role": "robot", "content": "x"}]}])
    r = d.post("/v1/datasets", {"name": "broken", "rows": rows})
    assert r.status == 400, r
    err = r.json["error"]
    assert err["field"] == "rows"
    assert "line 2: messages: the conversation must end with an assistant message" in err["message"]
    assert "line 21:" in err["message"] and "line 22:" not in err["message"]
    assert "23 bad lines in all (the first 20 shown)" in err["message"]
    assert d.ok(d.get("/v1/datasets"), 200)["datasets"] == []


def test_a_row_in_another_known_format_says_what_was_expected(start_trainerd):
    d = start_trainerd()
    sharegpt = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]}
    r = d.post("/v1/datasets", {"name": "sharegpt", "rows": jsonl([sharegpt])})
    assert r.status == 400, r
    err = r.json["error"]
    assert err["field"] == "rows"
    assert "line 1: messages: missing; this row looks like ShareGPT" in err["message"], err
    assert "rename conversations to messages" in err["message"]


def test_moving_a_name_to_new_content_says_where_it_moved_from(start_trainerd):
    d = start_trainerd()
    first = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS[:2])}), 201)
    assert "movedFrom" not in first
    same = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS[:2])}), 200)
    assert "movedFrom" not in same
    moved = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 201)
    assert moved["movedFrom"] == first["hash"]
    assert moved["name"] == "train" and moved["hash"] != first["hash"]
    assert json.dumps(d.ok(d.get("/v1/datasets/train"), 200)["hash"]) == json.dumps(moved["hash"])
