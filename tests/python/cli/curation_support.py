"""What the curation tests share (test_cli_curations.py, test_cli_pipelines_curate.py): a real
OpenAI-compatible HTTP judge written for the tests, with deterministic scores and a count of its
verdicts per answer, and session files of canonical captured calls."""
from __future__ import annotations

import http.server
import json
import re
import threading

import pytest

THRESHOLD = 0.5


def score_of(answer: str) -> float:
    """The judge's deterministic verdict for an answer: its number's digits spread over [0, 1)."""
    n = int(re.search(r"answer (\d+)", answer).group(1))
    return (n * 37 % 100) / 100


class Judge:
    """An OpenAI-compatible judge: scores each answer with score_of(). With `hold_after` set, every
    call past that many verdicts waits until release(); calls that waited through a `restart()`
    get no answer (their asker is gone)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.verdicts: dict[str, int] = {}          # answer -> verdicts given
        self.asked: list[tuple[int, str]] = []       # (generation, answer) of every call
        self.hold_after: int | None = None
        self.admitted = 0                            # calls let through to an answer
        self.gate = threading.Event()
        self.generation = 0
        judge = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b'{"data": []}')

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path.startswith("/refuse/"):  # the refusing judge: a bad key, say
                    data = b'{"error": "bad key"}'
                    self.send_response(401)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                    return
                user = body["messages"][1]["content"]
                answer = user.split("The assistant's answer:\n", 1)[1]
                with judge.lock:
                    generation = judge.generation
                    judge.asked.append((generation, answer))
                    hold = judge.hold_after is not None and judge.admitted >= judge.hold_after
                    judge.admitted += not hold
                if hold:
                    judge.gate.wait()
                    with judge.lock:
                        if generation != judge.generation:
                            self.close_connection = True
                            return
                with judge.lock:
                    judge.verdicts[answer] = judge.verdicts.get(answer, 0) + 1
                reply = {"id": "x", "object": "chat.completion", "model": body["model"],
                         "choices": [{"index": 0, "finish_reason": "stop",
                                      "message": {"role": "assistant",
                                                  "content": json.dumps({"score": score_of(answer)})}}],
                         "usage": {"prompt_tokens": 10, "completion_tokens": 5}}
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

    def release(self):
        """The held calls get their verdicts; nothing is held from now on."""
        with self.lock:
            self.hold_after = None
        self.gate.set()

    def restart(self):
        """The asker restarted: calls held so far will get no answer; nothing is held from now on."""
        with self.lock:
            self.generation += 1
            self.hold_after = None
        self.gate.set()

    def close(self):
        self.gate.set()
        self.server.shutdown()


@pytest.fixture
def judge():
    j = Judge()
    yield j
    j.close()


def config(judge: Judge) -> dict:
    return {"judges": [{"name": "test-judge", "url": judge.url, "model": "judge-model"},
                       {"name": "refusing-judge", "url": judge.url + "/refuse"}]}


def canonical(tmp_path, name: str, numbers) -> tuple[str, list[str]]:
    path = tmp_path / name
    answers = [f"answer {n}" for n in numbers]
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {a}"},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for a in answers))
    return str(path), answers
