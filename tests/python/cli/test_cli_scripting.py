"""The CLI's scripting surface (issue 12), through the real `trainer` against a real trainerd:
--jq with the real jq library, --json field selection, -q on waits, the client --timeout
against a server that never answers, and `trainer status` with the service up and down."""
from __future__ import annotations

import json
import socket

import pytest

from cli_support import DATASET_NAME, WORKLOAD, Cli, free_port, plan_text


def start_id(cli, *extra) -> str:
    """Starts a small run and returns its id, read with --jq the way a script would."""
    out = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", *extra, input=plan_text(max_steps=2))
    assert out.returncode == 0, out.stderr
    run_id = out.stdout.strip()
    assert out.stdout == run_id + "\n" and len(run_id) >= 12 and '"' not in run_id, out.stdout
    return run_id


def run_ids(cli) -> set[str]:
    return {r["runId"] for r in cli.json("runs", "list", "--limit", "100")["runs"]}


@pytest.fixture(scope="module")
def completed(ready) -> str:
    run_id = start_id(ready)
    ready("runs", "wait", run_id, "--timeout", "5m", "--exit-status", check=True)
    return run_id


@pytest.fixture()
def silent_server():
    """A socket that takes connections (the kernel's backlog) and never answers one."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        yield f"http://127.0.0.1:{s.getsockname()[1]}"


# ---- --jq -------------------------------------------------------------------------------------

def test_jq_on_get_list_info_and_a_filtered_runs_list(ready, completed):
    assert ready("runs", "get", completed, "--jq", ".phase", check=True).stdout == "COMPLETED\n"
    # A filter expression over the list: only completed runs' ids, one a line, raw.
    listed = ready("runs", "list", "--jq", '.runs[] | select(.phase == "COMPLETED") | .runId', check=True)
    ids = listed.stdout.splitlines()
    assert completed in ids and all(ready.json("runs", "get", i)["phase"] == "COMPLETED" for i in ids)
    info = ready.json("info")
    assert ready("info", "--jq", ".backend", check=True).stdout == info["backend"] + "\n"
    # Non-string results print as JSON: indented with -o json (the default), one line compact.
    names = ready("datasets", "list", "--jq", "[.datasets[].name]", check=True).stdout
    assert DATASET_NAME in json.loads(names) and names.startswith("[\n  ")
    compact = ready("workloads", "get", WORKLOAD, "--jq", "{name}", "-o", "json-compact", check=True)
    assert compact.stdout == json.dumps({"name": WORKLOAD}, separators=(",", ":")) + "\n"


def test_jq_that_does_not_compile_is_refused_and_nothing_is_sent(ready):
    before = run_ids(ready)
    out = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId |", input=plan_text(max_steps=2))
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stderr.startswith('trainer: --jq ".runId |" does not compile: jq: error: syntax error'), out.stderr
    assert out.stdout == ""
    assert run_ids(ready) == before
    unknown = ready("runs", "list", "--jq", "nosuch(1)")
    assert unknown.returncode == 2 and "nosuch/1 is not defined" in unknown.stderr, unknown.stderr


def test_jq_failing_on_the_answer_exits_nonzero_with_jqs_message(ready, completed):
    out = ready("runs", "get", completed, "--jq", ".phase.x")
    assert out.returncode == 1, out.stdout
    assert 'trainer: --jq ".phase.x": jq: error: Cannot index string with string \"x\"' in out.stderr, out.stderr


# ---- --json ------------------------------------------------------------------------------------

def test_json_selects_fields_of_each_item_and_of_one_record(ready, completed):
    listed = json.loads(ready("runs", "list", "--json", "runId,phase", check=True).stdout)
    assert isinstance(listed, list) and listed
    assert all(set(item) == {"runId", "phase"} for item in listed)
    assert {"runId": completed, "phase": "COMPLETED"} in listed
    one = json.loads(ready("runs", "get", completed, "--json", "runId,phase,workload", check=True).stdout)
    assert one["runId"] == completed and one["phase"] == "COMPLETED" and one["workload"]["name"] == WORKLOAD
    assert set(one) == {"runId", "phase", "workload"}
    # Selection first, then --jq on what it kept.
    first = ready("runs", "get", completed, "--json", "phase", "--jq", ".phase", check=True)
    assert first.stdout == "COMPLETED\n"


def test_json_refuses_an_unknown_field_by_name_and_lists_the_fields(ready, completed):
    out = ready("runs", "list", "--json", "runId,phse")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith('trainer: --json: no field "phse" in this answer (did you mean phase?); fields: '), out.stderr
    assert "runId" in out.stderr and "workload" in out.stderr
    offered = ready("runs", "get", completed, "--json=", check=True).stdout.splitlines()
    assert {"runId", "phase", "workload"} <= set(offered)
    # Listing fields must not change anything: a start is refused before it is sent.
    before = run_ids(ready)
    start = ready("runs", "start", "-f", "-", "--force", "--json=", input=plan_text(max_steps=2))
    assert start.returncode != 0 and "which was not sent" in start.stderr, start.stderr
    assert run_ids(ready) == before


# ---- -q ------------------------------------------------------------------------------------------

def test_quiet_wait_prints_no_progress_only_the_outcome(ready):
    run_id = start_id(ready)
    loud = ready("runs", "wait", run_id, "--timeout", "5m")
    quiet = ready("runs", "wait", run_id, "-q", "--timeout", "5m")
    assert loud.returncode == 0 and quiet.returncode == 0, (loud.stderr, quiet.stderr)
    # Without -q the view prints a progress line first; with it, only the summary.
    assert not loud.stdout.startswith("Run "), loud.stdout
    assert quiet.stdout.startswith(f"Run {run_id} COMPLETED"), quiet.stdout
    assert quiet.stdout in loud.stdout
    # In JSON: one document (the run), not the line-delimited events before it.
    record = json.loads(ready("runs", "wait", run_id, "-q", "-o", "json", check=True).stdout)
    assert record["runId"] == run_id and record["phase"] == "COMPLETED"
    streamed = ready("runs", "wait", run_id, "-o", "json", check=True).stdout
    assert streamed.count('"type":') > 1


def test_quiet_start_and_wait_with_jq_prints_only_the_phase(ready):
    out = ready("runs", "start", "-f", "-", "--force", "--wait", "-q", "--jq", ".phase", "--timeout", "5m",
                input=plan_text(max_steps=2))
    assert out.returncode == 0, out.stderr
    assert out.stdout == "COMPLETED\n"


# ---- --timeout -----------------------------------------------------------------------------------

def test_timeout_against_a_server_that_never_answers_names_the_url_and_the_timeout(bin_dir, silent_server):
    cli = Cli(bin_dir / "trainer", silent_server)
    out = cli("runs", "list", "--timeout", "1s", timeout=60)
    assert out.returncode == 6, (out.stdout, out.stderr)
    assert f"no answer from {silent_server} to GET /v1/runs" in out.stderr, out.stderr
    assert "within 1s (the client timeout, --timeout)" in out.stderr, out.stderr
    bad = cli("runs", "list", "--timeout", "soon")
    assert bad.returncode == 2 and '--timeout "soon" is not a duration' in bad.stderr


# ---- status --------------------------------------------------------------------------------------

def test_status_with_the_service_up(cli, trainerd):
    version = cli.json("info")["build"]["version"]
    port = trainerd.url.rsplit(":", 1)[1]
    out = cli("status")
    assert out.returncode == 0, out.stderr
    assert f"URL:      {trainerd.url} (from --trainer-url)" in out.stdout, out.stdout
    assert f"Tried:    127.0.0.1:{port}" in out.stdout, out.stdout
    assert f"Answers:  yes, trainerd {version}, ready, in " in out.stdout, out.stdout
    doc = cli.json("status", env={"TRAINER_URL": trainerd.url})
    [service] = doc["services"]
    assert service["urlFrom"] == "TRAINER_URL" and service["answers"] is True and service["ready"] is True
    assert service["version"] == version and service["latencyMs"] >= 0


def test_status_with_the_service_down_exits_0_and_says_so(bin_dir, silent_server):
    url = f"http://127.0.0.1:{free_port()}"
    cli = Cli(bin_dir / "trainer", url)
    out = cli("status")
    assert out.returncode == 0, out.stderr
    assert "Answers:  no: cannot reach the trainer service" in out.stdout and "connection refused" in out.stdout
    [service] = cli.json("status")["services"]
    assert service["answers"] is False and "connection refused" in service["error"]
    default = Cli(bin_dir / "trainer", None)("status", "--jq", ".services[0].urlFrom")
    assert default.returncode == 0 and default.stdout == "default\n"
    # A service that takes the connection and never answers is down too, within --timeout.
    stuck = Cli(bin_dir / "trainer", silent_server)("status", "--timeout", "1s", "--jq", ".services[0]", timeout=60)
    assert stuck.returncode == 0, stuck.stderr
    entry = json.loads(stuck.stdout)
    assert entry["answers"] is False and "within 1s" in entry["error"]
