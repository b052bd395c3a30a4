"""trainer-job's metrics reach the endpoint the service names, with the run's identity, even
when the job is stopped early: it pushes at phase changes, on SIGTERM and at exit, not only
every interval."""
import http.server
import json
import os
import signal
import subprocess
import threading
import time

import pytest

from test_sft import plan_for, task_rows
from engine_helpers import write_jsonl


class Receiver:
    """An OTLP/HTTP JSON receiver on a loopback port: keeps every body POSTed to /otlp/v1/metrics."""

    def __init__(self):
        self.bodies = []
        received = self.bodies

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                length = int(self.headers.get("Content-Length", 0))
                body = self.rfile.read(length)
                if self.path == "/otlp/v1/metrics":
                    received.append(json.loads(body))
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}/otlp"

    def close(self):
        self.server.shutdown()


def resource(body):
    attrs = body["resourceMetrics"][0]["resource"]["attributes"]
    return {a["key"]: next(iter(a["value"].values())) for a in attrs}


def metric_names(body):
    return {m["name"] for sm in body["resourceMetrics"][0]["scopeMetrics"] for m in sm["metrics"]}


@pytest.fixture
def receiver():
    r = Receiver()
    yield r
    r.close()


def test_a_job_stopped_early_in_training_has_exported_with_its_identity(tiny_models, bin_dir, tmp_path, receiver):
    model = tiny_models("qwen3", sharp=True)
    data = write_jsonl(tmp_path / "train.jsonl", task_rows(64))
    plan = plan_for(model, data, maxSteps=100000, validationSplit=0.0, validationFrequencySteps=0)
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    events_path = tmp_path / "events"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRAINER_"))}
    env |= {"TRAINER_RUN_ID": "run-early-7f3a", "TRAINER_ATTEMPT": "2", "TRAINER_WORKLOAD": "engine-test",
           "TRAINER_METHOD": "sft", "TRAINER_BASE_MODEL": "Qwen/Qwen3-tiny", "TRAINER_BASE_MODEL_SHA": "3f2a9c",
           "TRAINER_PROFILE": "cpu", "TRAINER_OTLP_ENDPOINT": receiver.endpoint,
           # An interval the job never reaches: whatever arrives came from a phase change, the
           # signal or the exit.
           "TRAINER_OTLP_INTERVAL_MS": "3600000"}
    proc = subprocess.Popen([str(bin_dir / "trainer-job"), "run", "--plan", str(tmp_path / "plan.json"), "--output",
                             str(tmp_path / "out"), "--events", str(events_path)], stderr=subprocess.PIPE, text=True,
                            env=env)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        if events_path.exists() and '"phase":"TRAINING"' in events_path.read_text():
            break
        time.sleep(0.05)
    time.sleep(1.5)  # stopped 1-2 s into training, far inside the export interval
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 143, stderr
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    assert events[0]["type"] == "hello" and events[0]["runId"] == "run-early-7f3a" and events[0]["attempt"] == 2
    assert events[-1]["type"] == "cancelled"

    # PREPARING, TRAINING, the signal, the exit: at least the two phases and the final push.
    assert len(receiver.bodies) >= 3, receiver.bodies
    last = receiver.bodies[-1]
    res = resource(last)
    assert res["akka.optimize.training.run.id"] == "run-early-7f3a"
    assert res["akka.optimize.training.run.attempt"] == "2"  # OTLP JSON writes 64-bit ints as strings
    assert res["akka.optimize.training.run.base_model"] == "Qwen/Qwen3-tiny"  # not the model folder
    assert res["akka.optimize.training.run.base_model_sha"] == "3f2a9c"
    assert res["akka.optimize.training.profile"] == "cpu"
    assert res["akka.optimize.training.workload"] == "engine-test"
    names = metric_names(last)
    assert "akka.optimize.training.sft.step.count" in names
    assert "akka.optimize.training.sft.data.rows" in names
    assert "akka.optimize.training.job.worker.info" not in names  # the worker ended with the job
    # While it trained, the worker series was there.
    assert any("akka.optimize.training.job.worker.info" in metric_names(b) for b in receiver.bodies[:-1])
    steps_done = sum(1 for e in events if e["type"] == "step")
    count = next(m for sm in last["resourceMetrics"][0]["scopeMetrics"] for m in sm["metrics"]
                 if m["name"] == "akka.optimize.training.sft.step.count")
    assert int(count["sum"]["dataPoints"][0]["asInt"]) == steps_done
