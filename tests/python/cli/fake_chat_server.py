"""A real OpenAI-compatible /v1/chat/completions server for tests (the curation tests' judge, the
distillation tests' teacher): a subclass says what a request asks about (`key_of`) and what it is
answered (`reply`); this base counts the calls, can hold every call past `hold_after` answers until
release(), and drops the calls held through a restart() (their asker is gone) and any call whose asker
closed its connection before it was answered (a killed asker's request read late, after the restart)."""
from __future__ import annotations

import http.server
import json
import select
import socket
import threading


class FakeChatServer:
    def __init__(self):
        self.lock = threading.Lock()
        self.asked: list[tuple[int, object]] = []  # (generation, key) of every call
        self.hold_after: int | None = None
        self.admitted = 0                          # calls let through to an answer
        self.gate = threading.Event()
        self.generation = 0
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                send(self, 200, {"data": []})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                refused = server.refusal(self.path)
                if refused is not None:
                    send(self, *refused)
                    return
                key = server.key_of(body)
                # A call admitted after a restart() may still come from the killed asker, its bytes
                # read late under load: the asker closed its end by then, so it gets no answer.
                if not server.admit(key) or asker_gone(self.connection):
                    self.close_connection = True
                    return
                send(self, 200, server.reply(body, key))

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    # What a subclass says.
    def key_of(self, body: dict):
        """What the call asks about (counted in `asked`)."""
        raise NotImplementedError

    def reply(self, body: dict, key) -> dict:
        """The chat completion answering the call (called once it is let through)."""
        raise NotImplementedError

    def refusal(self, path: str) -> tuple[int, dict] | None:
        """(status, body) for a path refused outright; None to answer it."""
        return None

    # The base's.
    def admit(self, key) -> bool:
        """Counts the call and holds it when past `hold_after`; False when it was held through a restart."""
        with self.lock:
            generation = self.generation
            self.asked.append((generation, key))
            hold = self.hold_after is not None and self.admitted >= self.hold_after
            self.admitted += not hold
        if hold:
            self.gate.wait()
            with self.lock:
                if generation != self.generation:
                    return False
        return True

    def asked_count(self) -> int:
        with self.lock:
            return len(self.asked)

    def release(self):
        """The held calls get their answers; nothing is held from now on."""
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


def asker_gone(connection: socket.socket) -> bool:
    """Whether the asker closed its end of the connection (an end of file waits to be read)."""
    readable, _, _ = select.select([connection], [], [], 0)
    if not readable:
        return False
    try:
        return connection.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def completion(model: str, message: dict, usage: bool = False, **choice) -> dict:
    """A chat completion with one choice holding `message` (`choice` overrides its other fields)."""
    out = {"id": "x", "object": "chat.completion", "model": model,
           "choices": [{"index": 0, "finish_reason": "stop", "message": message, **choice}]}
    if usage:
        out["usage"] = {"prompt_tokens": 10, "completion_tokens": 5}
    return out


def send(handler, status: int, body: dict) -> None:
    data = json.dumps(body).encode()
    handler.send_response(status)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)
