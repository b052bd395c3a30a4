"""What the distillation tests share (test_cli_distillations.py, test_cli_pipelines_distill.py): a
real HTTP teacher, an OpenAI-compatible /v1/chat/completions written here that answers each decision
deterministically, counts its calls per decision, can hold calls until released and gives bad
answers for chosen decisions; trainerd's configuration declaring it; and source rows whose user
messages name their row."""
from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

TOOLS = [{"type": "function", "function": {"name": "lookup", "description": "look a thing up",
                                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}}}}]


class Teacher:
    """Answers decision (ROW, MSG) (the last user message names ROW; MSG is the history's length)
    with "teacher R:M", or, when the row declares tools and the question asks for it, a call of
    `lookup`. Decisions in `bad` get an empty answer. With `hold_after` set, every call past that
    many answers waits until release(); calls held through a restart() get no answer."""

    def __init__(self):
        self.lock = threading.Lock()
        self.asked: list[tuple[int, tuple[int, int]]] = []  # (generation, decision) of every call
        self.answered: dict[tuple[int, int], int] = {}      # decision -> answers given
        self.requests: dict[tuple[int, int], dict] = {}     # decision -> the last request
        self.bad: set[tuple[int, int]] = set()
        self.odd: dict[tuple[int, int], dict] = {}          # decision -> the choice given instead
        self.hold_after: int | None = None
        self.admitted = 0
        self.gate = threading.Event()
        self.generation = 0
        teacher = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                history = [m for m in body["messages"] if m.get("content") != "Answer as the ACME agent."]
                last_user = [m for m in history if m["role"] == "user"][-1]["content"]
                decision = (int(re.search(r"row (\d+)", last_user).group(1)), len(history))
                with teacher.lock:
                    generation = teacher.generation
                    teacher.asked.append((generation, decision))
                    teacher.requests[decision] = body
                    hold = teacher.hold_after is not None and teacher.admitted >= teacher.hold_after
                    teacher.admitted += not hold
                if hold:
                    teacher.gate.wait()
                    with teacher.lock:
                        if generation != teacher.generation:
                            self.close_connection = True
                            return
                with teacher.lock:
                    teacher.answered[decision] = teacher.answered.get(decision, 0) + 1
                wants_call = history[-1]["role"] == "user" and "call lookup" in history[-1]["content"]
                message = answer_of(decision, "tools" in body, wants_call)
                if decision in teacher.bad:
                    message = {"role": "assistant", "content": ""}
                choice = {"index": 0, "finish_reason": "stop", "message": message}
                choice.update(teacher.odd.get(decision, {}))
                reply = {"id": "x", "object": "chat.completion", "model": body["model"], "choices": [choice]}
                data = json.dumps(reply).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def asked_count(self) -> int:
        with self.lock:
            return len(self.asked)

    def release(self):
        with self.lock:
            self.hold_after = None
        self.gate.set()

    def restart(self):
        """The asker restarted: calls held so far get no answer; nothing is held from now on."""
        with self.lock:
            self.generation += 1
        self.release()

    def close(self):
        self.gate.set()
        self.server.shutdown()


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
