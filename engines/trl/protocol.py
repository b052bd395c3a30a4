"""The worker's two channels to trainer-job (docs/engines.md, "The TRL worker").

Events: job-protocol events (src/protocol/job_protocol.h) as JSON lines on the worker's original
stdout, and nothing else: at start the real stdout is kept aside and file descriptor 1 is pointed
at stderr, so whatever a library prints lands in the job's log, never in the event stream.

Commands: one JSON object per line on stdin, from trainer-job: {"type": "pause"} (save the full
state at the next step boundary and stop), {"type": "stop"} (stop at the next step boundary,
nothing saved), and {"type": "rewards", "id": N, "scores": [...]} (or "error"), the reply to the
worker's reward_request N (score()). End of stdin means trainer-job is gone: the worker stops as
for "stop".
"""
from __future__ import annotations

import json
import math
import os
import sys
import threading
import time


class Channel:
    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)  # library prints go to stderr from here on
        sys.stdout = sys.stderr
        self._lock = threading.Lock()
        self.pause = threading.Event()
        self.stop = threading.Event()
        self._replies: dict[int, dict] = {}
        self._reply_ready = threading.Condition()
        self._next_request = 0
        self._closed = False
        threading.Thread(target=self._read_commands, name="commands", daemon=True).start()

    def emit(self, event_type: str, **fields) -> None:
        """Writes one event; None fields are left out, non-finite numbers become null (JSON has none)."""
        body = {"type": event_type}
        for k, v in fields.items():
            if v is None:
                continue
            if isinstance(v, float) and not math.isfinite(v):
                v = None
            body[k] = v
        with self._lock:
            self._out.write(json.dumps(body, separators=(",", ":")) + "\n")
            self._out.flush()

    def alive_until(self, done: threading.Event, every: float = 5.0) -> None:
        """Heartbeats every `every` seconds from a thread until `done` is set: the imports, the
        model's load and the data's tokenization send no event of their own. From the first step
        on there is none, so a worker stuck in its training loop falls silent and trainer-job
        ends it as hung."""
        t0 = time.time()

        def beat():
            while not done.wait(every):
                self.emit("heartbeat", uptimeSeconds=time.time() - t0)

        threading.Thread(target=beat, name="setup-heartbeat", daemon=True).start()

    def raw(self, text: str) -> None:
        """Writes a line as it is (the fault injection's malformed line)."""
        with self._lock:
            self._out.write(text + "\n")
            self._out.flush()

    def _read_commands(self) -> None:
        for line in sys.stdin:
            line = line.strip()
            if not line:
                continue
            try:
                command = json.loads(line).get("type")
            except (ValueError, AttributeError):
                print(f"trl worker: ignoring a command that is not JSON: {line[:200]}", file=sys.stderr)
                continue
            if command == "pause":
                self.pause.set()
            elif command == "stop":
                self.stop.set()
            elif command == "rewards":
                with self._reply_ready:
                    self._replies[json.loads(line)["id"]] = json.loads(line)
                    self._reply_ready.notify_all()
            else:
                print(f"trl worker: ignoring unknown command {command!r}", file=sys.stderr)
        self.stop.set()  # trainer-job closed our stdin: it is gone or wants us gone
        with self._reply_ready:
            self._closed = True
            self._reply_ready.notify_all()

    def score(self, term: int, items: list[dict]) -> list[float]:
        """Asks trainer-job to score `items` ({row, input, output, expected}) with the plan's reward
        term `term` (reward_request on stdout, its `rewards` reply on stdin): the job's own graders
        score a TRL run as they score a native one."""
        return self.score_reply(term, items)["scores"]

    def score_reply(self, term: int, items: list[dict]) -> dict:
        """score()'s whole reply: `scores`, and per completion `failures` (the cause, "" for a
        score) and `callSeconds`, and the batch's judge `inputTokens` and `outputTokens`."""
        with self._reply_ready:
            self._next_request += 1
            rid = self._next_request
        self.emit("reward_request", id=rid, term=term, items=items)
        with self._reply_ready:
            while rid not in self._replies:
                if self._closed:
                    raise RuntimeError("trainer-job went away while scoring")
                self._reply_ready.wait(1.0)
            reply = self._replies.pop(rid)
        if "error" in reply:
            raise RuntimeError(reply["error"])
        reply["scores"] = [float(x) for x in reply["scores"]]
        return reply
