"""What the distillation tests share (test_cli_distillations.py, test_cli_pipelines_distill.py): a
real HTTP teacher (fake_chat_server.py) that answers each decision deterministically, counts its
calls per decision, can hold calls until released and gives bad answers for chosen decisions; trainerd's configuration declaring it; and source rows whose user
messages name their row."""
from __future__ import annotations

import json
import re

import pytest

from fake_chat_server import FakeChatServer, completion

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look a thing up",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


class Teacher(FakeChatServer):
    """Answers decision (ROW, MSG) (the last user message names ROW; MSG is the history's length)
    with "teacher R:M", or, when the row declares tools and the question asks for it, a call of
    `lookup`. Decisions in `bad` get an empty answer. Holds and restarts as FakeChatServer does."""

    def __init__(self):
        self.answered: dict[tuple[int, int], int] = {}      # decision -> answers given
        self.requests: dict[tuple[int, int], dict] = {}     # decision -> the last request
        self.bad: set[tuple[int, int]] = set()
        self.odd: dict[tuple[int, int], dict] = {}          # decision -> the choice given instead
        super().__init__()

    @staticmethod
    def history(body: dict) -> list[dict]:
        return [m for m in body["messages"] if m.get("content") != "Answer as the ACME agent."]

    def key_of(self, body: dict):
        history = self.history(body)
        last_user = [m for m in history if m["role"] == "user"][-1]["content"]
        decision = (int(re.search(r"row (\d+)", last_user).group(1)), len(history))
        with self.lock:
            self.requests[decision] = body
        return decision

    def reply(self, body: dict, decision) -> dict:
        with self.lock:
            self.answered[decision] = self.answered.get(decision, 0) + 1
        history = self.history(body)
        wants_call = history[-1]["role"] == "user" and "call lookup" in history[-1]["content"]
        message = answer_of(decision, "tools" in body, wants_call)
        if decision in self.bad:
            message = {"role": "assistant", "content": ""}
        choice = {"message": message, **self.odd.get(decision, {})}
        return completion(body["model"], choice.pop("message"), **choice)


def answer_of(decision, has_tools: bool, wants_call: bool) -> dict:
    r, m = decision
    if has_tools and wants_call:
        return {"role": "assistant", "content": None,
                "tool_calls": [{"id": f"t{r}", "type": "function",
                                "function": {"name": "lookup", "arguments": json.dumps({"q": f"{r}:{m}"})}}]}
    return {"role": "assistant", "content": f"teacher {r}:{m}"}


@pytest.fixture
def teacher():
    t = Teacher()
    yield t
    t.close()


def config(teacher: Teacher) -> dict:
    return {"judges": [{"name": "teacher-model", "url": teacher.url, "model": "big-model"}]}


def source_rows(n: int) -> list[dict]:
    """Row 0 calls a tool (a tool call, its result, a closing answer); every other row has two turns."""
    rows = [{"messages": [{"role": "user", "content": "row 0: call lookup"},
                          {"role": "assistant", "content": None,
                           "tool_calls": [{"id": "c0", "type": "function",
                                           "function": {"name": "lookup", "arguments": "{\"q\": \"x\"}"}}]},
                          {"role": "tool", "tool_call_id": "c0", "content": "found"},
                          {"role": "assistant", "content": "source answer"}],
             "tools": TOOLS}]
    for r in range(1, n):
        rows.append({"messages": [{"role": "user", "content": f"row {r}: first question"},
                                  {"role": "assistant", "content": f"source {r}:1"},
                                  {"role": "user", "content": f"row {r}: second question"},
                                  {"role": "assistant", "content": f"source {r}:3"}]})
    return rows
