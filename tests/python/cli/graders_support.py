"""Real graders for the graders' end-to-end tests: an OpenAI-compatible judge and an http:
evaluator served on loopback by one threaded HTTP server, each behaviour under its own path.

Under /NAME/v1/chat/completions a judge answers by NAME:
  good     {"score": 1} when the answer says "billing", else {"score": 0.25}; usage 30 in, 5 out
  cycle    call k (counted across the run) answers by k % 3: a good verdict, a reply without a
           verdict (no_verdict), or nothing until after the term's timeout (timeout)
  refuser  HTTP 401
  broken   HTTP 500
Under /NAME/evaluate an http: evaluator answers by NAME:
  eval-cycle  by k % 3: {"ok": true}, {"answer": "?"} (no_verdict), HTTP 500 (unreachable)
  eval-good   {"score": 1} when the output says "billing", else {"score": 0.5}
  eval-refuser  HTTP 403
GET /NAME/v1/models answers 200 for every NAME (the service's readiness probe).
Every request body is kept, per NAME, for the tests to read.

Given an ssl.SSLContext the server speaks HTTPS only (its url starts with https://).

Also the RL plan the graders' CLI tests submit (one reward term on the toy task, rl_toy.py) and
running it to its end.
"""
from __future__ import annotations

import collections
import json
import re
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "grader-tests"
SLOW_SECONDS = 3.0  # longer than the timeoutSeconds the tests give the cycling terms


def chat_completion(content: str, usage: bool = True) -> dict:
    reply = {"id": "chatcmpl-test", "object": "chat.completion", "model": "judge",
             "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}]}
    if usage:
        reply["usage"] = {"prompt_tokens": 30, "completion_tokens": 5, "total_tokens": 35}
    return reply


class GraderServer:
    def __init__(self, tls: ssl.SSLContext | None = None):
        self.requests: dict[str, list] = collections.defaultdict(list)
        self.probes: dict[str, int] = collections.defaultdict(int)
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _send(self, status: int, body):
                data = (body if isinstance(body, str) else json.dumps(body)).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the caller gave up (its timeout)

            def do_GET(self):
                name, _, rest = self.path.strip("/").partition("/")
                if rest == "v1/models":
                    with server._lock:
                        server.probes[name] += 1
                    return self._send(200, {"object": "list", "data": [{"id": name, "object": "model"}]})
                self._send(404, {"error": "not found"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"null")
                name, _, rest = self.path.strip("/").partition("/")
                with server._lock:
                    k = len(server.requests[name])
                    server.requests[name].append(body)
                if rest == "v1/chat/completions":
                    return server._judge(self, name, k, body)
                if rest == "evaluate":
                    return server._evaluator(self, name, k, body)
                self._send(404, {"error": "not found"})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        if tls is not None:  # the handshake runs at accept; a client that refuses it is dropped there
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        scheme = "https" if tls is not None else "http"
        self.url = f"{scheme}://127.0.0.1:{self._server.server_address[1]}"

    def _judge(self, h, name: str, k: int, body: dict):
        answer = body["messages"][-1]["content"].split("The assistant's answer:\n", 1)[-1]
        if name == "good":
            return h._send(200, chat_completion(json.dumps({"score": 1 if "billing" in answer else 0.25,
                                                            "explanation": "checked"})))
        if name == "cycle":
            if k % 3 == 0:
                return h._send(200, chat_completion('Verdict: {"score": 0.5}'))
            if k % 3 == 1:
                return h._send(200, chat_completion("I liked this answer a lot."))
            time.sleep(SLOW_SECONDS)
            return h._send(200, chat_completion('{"score": 1}'))
        if name == "refuser":
            return h._send(401, {"error": {"message": "invalid API key", "type": "invalid_request_error"}})
        return h._send(500, {"error": "the judge crashed"})

    def _evaluator(self, h, name: str, k: int, body: dict):
        if name == "eval-cycle":
            if k % 3 == 0:
                return h._send(200, {"ok": True, "explanation": "fine"})
            if k % 3 == 1:
                return h._send(200, {"answer": "?"})
            return h._send(500, "internal error")
        if name == "eval-good":
            return h._send(200, {"score": 1 if "billing" in body["output"] else 0.5})
        return h._send(403, {"error": "forbidden"})

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def plan(term: str, steps: int = 2, group: int = 2, prompts: int = 2, length: int = 8, lr: float = 0.006) -> str:
    """An RL plan with the one reward term `term` (a YAML flow mapping)."""
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {steps}, seed: 3}}",
        f"  reward: {{terms: [{term}]}}",
        "  rlHyperparams:", f"    groupSize: {group}", f"    promptsPerStep: {prompts}",
        f"    maxCompletionLength: {length}", "    microBatchSize: 32",
        f"    optimizer: {{learningRate: {lr}, schedule: constant}}",
        "execution: {gpus: 0}"]) + "\n"


def run_to_end(cli, text: str, tmp_path, expect: str = "COMPLETED"):
    """Starts `text` with --wait; returns (run, steps)."""
    f = tmp_path / "plan.yaml"
    f.write_text(text)
    out = cli("runs", "start", "-f", f, "--force", "--wait", timeout=900)
    match = re.search(r"Started run ([0-9a-f]+)", out.stdout)
    assert match, out.stdout + out.stderr
    run = cli.json("runs", "get", match.group(1))
    assert run["phase"] == expect, (run["phase"], run.get("failureReason"), out.stdout, out.stderr)
    return run, cli.json("runs", "metrics", run["runId"])["steps"]


def phases(run):
    return [p["phase"] for p in run["phaseHistory"]]
