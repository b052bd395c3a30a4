"""An evaluation outlives its jobs (issue 33, "the same for evaluations"): through the real `trainer`
against a real trainerd, the evaluation's real `trainer-job evaluate` is SIGKILLed while it grades
(as an out-of-memory kill or a preemption would). The evaluation gets a new attempt after the
backoff and completes; `evaluations get` lists each attempt with how it ended. A job SIGSTOPped
(alive but silent: its heartbeat stops) is stopped by trainerd as hung and the next attempt
completes. Three lost attempts fail it, naming each; a job that fails by its own verdict (its
grader refused) is not retried."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from stopped_processes import stopped
from toy_rl_service import toy_rl_service
from waiting import wait_for

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "evaluation-attempts"
SILENCE_SECONDS = 6  # limits.jobSilenceSeconds of this module's trainerd: the job beats every second


class Evaluator:
    """An http: evaluator. While `held` is set it answers nothing (the evaluation's job waits in its
    first call, so a test can kill it there); `refuse` makes it answer 400; else it scores 1."""

    def __init__(self):
        self.held = threading.Event()
        self.calls = 0
        self.refuse = False
        this = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                this.calls += 1
                while this.held.is_set():
                    time.sleep(0.1)
                status, data = (400, b'{"error": "this evaluator refuses"}') if this.refuse else (200, b'{"score": 1}')
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the job was killed while it waited

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.grader = f"http:http://127.0.0.1:{self.server.server_address[1]}/evaluate"

    def close(self):
        self.held.clear()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, rows=8,
                        config={"limits": {"attemptBackoffSeconds": 1, "jobSilenceSeconds": SILENCE_SECONDS,
                                           "cancelGraceSeconds": 1}}) as (_, cli):
        yield cli


@pytest.fixture
def evaluator():
    e = Evaluator()
    yield e
    e.close()


def evaluation_job_pids(evaluation_id: str) -> list[int]:
    found = subprocess.run(["pgrep", "-f", f"trainer-job evaluate .*{evaluation_id}"], capture_output=True, text=True)
    return [int(p) for p in found.stdout.split()]


def start(cli, evaluator) -> str:
    return cli("evaluations", "start", "--model", MODEL, "--workload", WORKLOAD, "--dataset", DATASET,
               "--grader", evaluator.grader, "--jq", ".evaluationId", check=True).stdout.strip()


def grading_job_pids(cli, evaluator, evaluation_id: str, attempt: int) -> list[int]:
    """The pids of attempt `attempt`'s job, once it waits in a grader call."""
    calls = evaluator.calls
    wait_for(lambda: len(cli.json("evaluations", "get", evaluation_id).get("attempts") or []) >= attempt, 120,
             f"attempt {attempt} to start")
    wait_for(lambda: evaluator.calls > calls and evaluation_job_pids(evaluation_id), 120,
             f"attempt {attempt}'s job to call the grader")
    return evaluation_job_pids(evaluation_id)


def kill_attempt(cli, evaluator, evaluation_id: str, attempt: int) -> None:
    """SIGKILLs the job of attempt `attempt` once it waits in a grader call."""
    for pid in grading_job_pids(cli, evaluator, evaluation_id, attempt):
        os.kill(pid, signal.SIGKILL)


def ended(cli, evaluation_id: str) -> dict:
    return wait_for(lambda: (e := cli.json("evaluations", "get", evaluation_id))["phase"] in
                    ("COMPLETED", "FAILED", "CANCELLED") and e, 180, "the evaluation to end")


def test_a_killed_evaluation_job_gets_a_new_attempt_and_the_evaluation_completes(cli, evaluator):
    evaluator.held.set()
    evaluation_id = start(cli, evaluator)
    kill_attempt(cli, evaluator, evaluation_id, 1)
    wait_for(lambda: len(cli.json("evaluations", "get", evaluation_id)["attempts"]) == 2, 60, "a second attempt")
    evaluator.held.clear()
    done = ended(cli, evaluation_id)
    assert done["phase"] == "COMPLETED", done
    assert done["report"]["rows"] == 8, done["report"]
    first, second = done["attempts"]
    assert (first["number"], first["cause"], first["exitCode"]) == (1, "killed", 137), first
    assert "the evaluation job exited with code 137 without reporting an outcome" in first["reason"], first
    assert (second["number"], second["cause"]) == (2, "completed"), second
    assert first["ended"] <= second["started"], done["attempts"]
    # Its cost counts from the first attempt's start (its claim was held throughout).
    assert done["startedAt"] == first["started"], done
    text = cli("evaluations", "get", evaluation_id, check=True).stdout
    assert "attempt 2 of 3 (attempt 1: killed, code 137)" in text, text


def test_a_stopped_evaluation_job_is_stopped_as_hung_and_the_next_attempt_completes(cli, evaluator):
    evaluator.held.set()
    evaluation_id = start(cli, evaluator)
    with stopped(grading_job_pids(cli, evaluator, evaluation_id, 1)):  # alive, but silent
        wait_for(lambda: len(cli.json("evaluations", "get", evaluation_id)["attempts"]) == 2, 60, "a second attempt")
    evaluator.held.clear()
    done = ended(cli, evaluation_id)
    assert done["phase"] == "COMPLETED", done
    first, second = done["attempts"]
    # SIGTERM waits while the process is stopped; the SIGKILL after cancelGraceSeconds ends it.
    assert (first["cause"], first["exitCode"]) == ("hung", 137), first
    assert (f"the evaluation job sent nothing, not even its heartbeat, for more than limits.jobSilenceSeconds "
            f"({SILENCE_SECONDS} s); trainerd stopped it") in first["reason"], first
    assert second["cause"] == "completed", second
    text = cli("evaluations", "get", evaluation_id, check=True).stdout
    assert "attempt 1: hung, code 137" in text, text


def test_three_lost_attempts_fail_the_evaluation_naming_each(cli, evaluator):
    evaluator.held.set()
    evaluation_id = start(cli, evaluator)
    for attempt in (1, 2, 3):
        kill_attempt(cli, evaluator, evaluation_id, attempt)
    done = ended(cli, evaluation_id)
    assert done["phase"] == "FAILED", done
    assert done["failureReason"].startswith(
        "all 3 attempts ended without an outcome: attempt 1: killed, code 137; attempt 2: killed, code 137; "
        "attempt 3: killed, code 137"), done["failureReason"]
    assert [a["cause"] for a in done["attempts"]] == ["killed"] * 3, done["attempts"]
    assert not evaluation_job_pids(evaluation_id)


def test_an_evaluation_job_that_fails_by_its_own_verdict_is_not_retried(cli, evaluator):
    evaluator.refuse = True
    evaluation_id = start(cli, evaluator)
    done = ended(cli, evaluation_id)
    assert done["phase"] == "FAILED", done
    assert [a["cause"] for a in done["attempts"]] == ["failed"], done["attempts"]
    assert "400" in done["failureReason"], done["failureReason"]
    listed = json.dumps(done)
    assert "nextAttemptAt" not in listed, listed
