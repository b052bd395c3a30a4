"""Endpoints (issue 24, the service's first slice): `trainer endpoints create|wait|list|get|send|delete`
through the real CLI against a real trainerd, which starts the real `trainer-job serve` through
its local backend on the tiny base model. Greedy answers through trainerd equal the answers of
`trainer-job serve` started by hand on the same model; delete stops the process and frees its
SERVING claim; a killed process is started again on the same claim, three times, then fails its
endpoint with a reason naming the signal; a run's
adapter attaches to the endpoint already serving its base model (same process, same claim), and
detach, disable, enable and the delete refusal work through the CLI."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request

import pytest

import auth
from cli_support import MODEL_NAME, WORKLOAD, call, plan_text, start_run_id
from serving_processes import serving_pids
from waiting import wait_for

PROMPT = "Is this review positive? The soup was cold."
MAX_TOKENS = 8


def claims(cli) -> dict:
    return {c["owner"]: c for c in cli.json("capacity")["claims"]}


def post(url: str, body: dict) -> tuple[int, dict]:
    """POSTs `body`, waiting up to 120 s (a generation on the CPU); (status, answer)."""
    return call(url, "POST", body, timeout=120)


def chat(messages) -> dict:
    return {"messages": messages, "temperature": 0, "max_tokens": MAX_TOKENS}


def start_direct(bin_dir, tiny_model, *extra) -> tuple[subprocess.Popen, str]:
    """`trainer-job serve` started by hand on the same tiny model, named as trainerd names it."""
    proc = subprocess.Popen([str(bin_dir / "trainer-job"), "serve", "--model", str(tiny_model), "--name", MODEL_NAME,
                             "--port", "0", *extra], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    hello = json.loads(proc.stdout.readline())
    return proc, f"http://127.0.0.1:{hello['port']}"


def stop_direct(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="module")
def direct(bin_dir, tiny_model):
    proc, url = start_direct(bin_dir, tiny_model)
    yield url
    stop_direct(proc)


def create_ready(cli) -> dict:
    e = cli.json("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--wait", "--timeout", "5m")
    assert e["phase"] == "READY", e
    return e


def test_bad_input_is_refused_by_field_and_nothing_is_stored(ready):
    no_workload = ready("endpoints", "create", "--model", MODEL_NAME)
    assert no_workload.returncode == 1 and "workload" in no_workload.stderr, no_workload.stderr
    no_model = ready("endpoints", "create", "--workload", WORKLOAD)
    assert no_model.returncode == 1 and "model" in no_model.stderr, no_model.stderr
    unknown = ready("endpoints", "create", "--model", "no-such-model", "--workload", WORKLOAD)
    assert unknown.returncode == 1 and "no-such-model" in unknown.stderr, unknown.stderr
    lonely_timeout = ready("endpoints", "create", "--model", MODEL_NAME, "--workload", WORKLOAD, "--timeout", "1m")
    assert lonely_timeout.returncode == 2 and "--wait" in lonely_timeout.stderr, lonely_timeout.stderr
    status, body = post(ready.url + "/v1/endpoints", {"model": MODEL_NAME, "workload": WORKLOAD, "replicas": 2})
    assert status == 400 and body["error"]["field"] == "replicas", body
    status, body = post(ready.url + "/v1/endpoints", {"model": MODEL_NAME, "workload": "no-such-workload"})
    assert status == 404 and body["error"]["field"] == "workload", body
    ready("workloads", "create", "no-devices", "--gpu-quota", "0", check=True)
    over = ready("endpoints", "create", "--model", MODEL_NAME, "--workload", "no-devices")
    assert over.returncode == 1 and "quota of 0 devices" in over.stderr and "no-devices" in over.stderr, over.stderr
    assert ready.json("endpoints", "list")["endpoints"] == []
    assert claims(ready) == {}
    missing = ready("endpoints", "get", "0123abcd")
    assert missing.returncode == 1 and "no endpoint" in missing.stderr


def test_an_endpoint_answers_greedy_as_the_serving_process_does_and_delete_stops_it(ready, direct):
    e = create_ready(ready)
    eid = e["endpointId"]
    assert [m["name"] for m in e["models"]] == [MODEL_NAME]
    held = claims(ready)[eid]
    assert held["kind"] == "SERVING" and held["state"] == "GRANTED" and held["devices"] == 1, held
    [pid] = serving_pids(eid)

    sent = ready.json("endpoints", "send", eid, "--input", PROMPT, "--temperature", 0, "--max-tokens", MAX_TOKENS)
    status, expected = post(direct + "/v1/chat/completions",
                            {"model": MODEL_NAME, **chat([{"role": "user", "content": PROMPT}])})
    assert status == 200, expected
    assert sent["model"] == MODEL_NAME
    assert sent["output"] == expected["choices"][0]["message"]["content"] and sent["output"], (sent, expected)
    counts = ("prompt_tokens", "completion_tokens", "total_tokens")  # not the prefix cache's share
    assert [sent["usage"][k] for k in counts] == [expected["usage"][k] for k in counts], (sent, expected)
    assert 0 < sent["usage"]["completion_tokens"] <= MAX_TOKENS, sent
    text = ready("endpoints", "send", eid, "--input", PROMPT, "--temperature", 0, "--max-tokens", MAX_TOKENS,
                 check=True).stdout
    assert text == sent["output"] + "\n"

    # The serving process's own errors pass through (streaming: test_cli_endpoint_streaming.py).
    status, body = post(f"{ready.url}/v1/endpoints/{eid}/v1/chat/completions",
                        {"model": "nope", **chat([{"role": "user", "content": "hi"}])})
    assert status == 404 and body["error"]["code"] == "model_not_found", body

    listed = ready.json("endpoints", "list", "--phase", "active")["endpoints"]
    assert [x["endpointId"] for x in listed] == [eid] and listed[0]["phase"] == "READY"
    got = ready.json("endpoints", "get", eid[:8])
    assert got["endpointId"] == eid and got["address"].startswith("http://127.0.0.1:") and "_job" not in got
    assert "READY" in ready("endpoints", "get", eid, check=True).stdout

    deleted = ready.json("endpoints", "delete", eid)
    assert deleted["phase"] == "DELETING", deleted
    wait_for(lambda: ready.json("endpoints", "get", eid)["phase"] == "DELETED", 60, "the endpoint to be DELETED")
    assert not os.path.exists(f"/proc/{pid}"), f"serving process {pid} still exists"
    assert eid not in claims(ready)
    again = ready("endpoints", "delete", eid)
    assert again.returncode == 1 and "already DELETED" in again.stderr
    refused = ready("endpoints", "send", eid, "--input", "hi")
    assert refused.returncode == 1 and "DELETED" in refused.stderr


def test_a_killed_serving_process_is_restarted_then_fails_its_endpoint_naming_the_signal(ready):
    eid = create_ready(ready)["endpointId"]
    for restart in (1, 2, 3):
        [pid] = serving_pids(eid)
        os.kill(pid, signal.SIGKILL)
        again = wait_for(lambda: (lambda e: e if e["phase"] == "READY" and e.get("restarts") == restart else None)(
            ready.json("endpoints", "get", eid)), 120, f"restart {restart} of the serving process")
        why = again["lastRestart"]["reason"]
        assert "killed by signal 9 (SIGKILL)" in why and f"pid {pid}" in why, again
        assert serving_pids(eid) != [pid]
        assert ready.json("endpoints", "send", eid, "--input", "hi", "--max-tokens", 2)["usage"]["completion_tokens"] > 0
        assert eid in claims(ready)  # the same claim all along
    [pid] = serving_pids(eid)
    os.kill(pid, signal.SIGKILL)
    failed = wait_for(lambda: (lambda e: e if e["phase"] == "FAILED" else None)(ready.json("endpoints", "get", eid)),
                      60, "the endpoint to fail")
    assert "killed by signal 9 (SIGKILL)" in failed["failureReason"], failed
    assert f"pid {pid}" in failed["failureReason"] and "after 3 restarts" in failed["failureReason"], failed
    assert eid not in claims(ready)
    waited = ready("endpoints", "wait", eid)
    assert waited.returncode == 1 and "will not answer" in waited.stderr and "SIGKILL" in waited.stderr


def served(cli, eid) -> list:
    return [(m["name"], m["kind"], m["enabled"]) for m in cli.json("endpoints", "get", eid)["models"]]


def refusal(cli, *args) -> str:
    done = cli(*args)
    assert done.returncode == 1, (args, done.stdout, done.stderr)
    return done.stderr


def test_a_runs_adapter_attaches_to_its_base_models_endpoint_without_new_devices(ready, trainerd, bin_dir, tiny_model):
    run = start_run_id(ready, plan_text(3))
    ready("workloads", "create", "elsewhere", check=True)
    base = create_ready(ready)
    eid = base["endpointId"]
    [pid] = serving_pids(eid)
    ready("runs", "wait", run, "--timeout", "10m", "--exit-status", "-q", check=True)
    other = ready("endpoints", "create", "--model", run, "--workload", "elsewhere")
    assert other.returncode == 1 and "workload" in other.stderr and "leave workload out" in other.stderr, other.stderr

    # The candidate's base is served in its own workload: it attaches there, same process, same claim.
    held = claims(ready)
    text = ready("endpoints", "create", "--model", run[:8], check=True).stdout
    assert f"Attached {run} to endpoint {eid}" in text and "no new devices" in text, text
    e = ready.json("endpoints", "create", "--model", run, "--wait")  # again: already served there
    assert e["endpointId"] == eid and e["phase"] == "READY" and e["workload"]["name"] == WORKLOAD, e
    assert served(ready, eid) == [(MODEL_NAME, "base", True), (run, "adapter", True)]
    assert serving_pids(eid) == [pid] and claims(ready) == held
    assert ready.json("endpoints", "list", "--phase", "active")["endpoints"][0]["endpointId"] == eid

    adapter = ready.json("runs", "get", run)["adapterPath"]
    proc, url = start_direct(bin_dir, tiny_model, "--adapter", f"{run}={adapter}")
    try:
        for model in (run, MODEL_NAME):
            status, expected = post(url + "/v1/chat/completions",
                                    {"model": model, **chat([{"role": "user", "content": PROMPT}])})
            assert status == 200, expected
            sent = ready.json("endpoints", "send", eid, "--input", PROMPT, "--model", model,
                              "--temperature", 0, "--max-tokens", MAX_TOKENS)
            assert sent["model"] == model and sent["output"] == expected["choices"][0]["message"]["content"], sent
        # Without --model, the last model attached answers.
        plain = ready.json("endpoints", "send", eid, "--input", PROMPT, "--temperature", 0, "--max-tokens", MAX_TOKENS)
        assert plain["model"] == run
    finally:
        stop_direct(proc)

    # Delete is refused while it serves two models, naming them; nothing changes.
    why = refusal(ready, "endpoints", "delete", eid)
    assert "serves 2 models" in why and run in why and MODEL_NAME in why and "detach" in why, why
    assert ready.json("endpoints", "get", eid)["phase"] == "READY"

    # Disabled: trainerd answers 409 for it, the other model still answers; enable undoes it.
    assert "disabled" in ready("endpoints", "disable", eid, run[:8], check=True).stdout
    assert served(ready, eid)[1] == (run, "adapter", False)
    status, body = post(f"{ready.url}/v1/endpoints/{eid}/v1/chat/completions",
                        {"model": run, **chat([{"role": "user", "content": "hi"}])})
    assert status == 409 and body["error"]["code"] == "model_disabled" and run in body["error"]["message"], body
    assert "is disabled" in refusal(ready, "endpoints", "send", eid, "--input", "hi", "--model", run)
    plain = ready.json("endpoints", "send", eid, "--input", PROMPT, "--temperature", 0, "--max-tokens", MAX_TOKENS)
    assert plain["model"] == MODEL_NAME  # the last enabled model answers when none is named
    ready("endpoints", "enable", eid, run, check=True)
    assert served(ready, eid)[1] == (run, "adapter", True)
    assert ready.json("endpoints", "send", eid, "--input", "hi", "--model", run, "--max-tokens", 2)["model"] == run

    # Refusals name what was wrong and change nothing.
    assert "does not serve 'nope'" in refusal(ready, "endpoints", "detach", eid, "nope")
    assert "does not serve 'nope'" in refusal(ready, "endpoints", "disable", eid, "nope")
    status, body = post(f"{ready.url}/v1/endpoints/{eid}/v1/chat/completions",
                        {"model": "nope", **chat([{"role": "user", "content": "hi"}])})
    assert status == 404 and body["error"]["code"] == "model_not_found" and run in body["error"]["message"], body
    assert served(ready, eid) == [(MODEL_NAME, "base", True), (run, "adapter", True)]

    # trainerd's /metrics: the forwarded requests by outcome, their tokens, the process's KV blocks.
    with urllib.request.urlopen(ready.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    def value(series: str) -> float:
        lines = [l for l in metrics.splitlines() if l.startswith(series + " ")]
        assert len(lines) == 1, (series, metrics[-3000:])
        return float(lines[0].split()[-1])
    label = f'endpoint="{eid}",model="{run}"'
    assert value(f'trainer_endpoint_requests_total{{{label},outcome="ok"}}') >= 3
    assert value(f'trainer_endpoint_requests_total{{{label},outcome="refused"}}') == 2  # while disabled
    assert value(f'trainer_endpoint_completion_tokens_total{{{label}}}') > 0
    assert value(f'trainer_endpoint_kv_blocks{{endpoint="{eid}",state="total"}}') > 0
    assert value(f'trainer_endpoint_kv_blocks{{endpoint="{eid}",state="used"}}') == 0  # nothing running now

    # Detach the adapter: the process drops it; the base model still answers; then the last detach
    # takes the endpoint down.
    text = ready("endpoints", "detach", eid, run[:8], check=True).stdout
    assert f"Detached {run[:8]} from endpoint {eid}" in text, text
    assert served(ready, eid) == [(MODEL_NAME, "base", True)]
    # The process itself, with the secret trainerd handed it (docs/security.md, "Serving processes").
    direct_models = urllib.request.Request(ready.json("endpoints", "get", eid)["address"] + "/models",
                                           headers=auth.serving_secret(trainerd.data_dir, eid))
    with urllib.request.urlopen(direct_models, timeout=30) as r:
        assert [m["id"] for m in json.load(r)["data"]] == [MODEL_NAME]
    status, body = post(f"{ready.url}/v1/endpoints/{eid}/v1/chat/completions",
                        {"model": run, **chat([{"role": "user", "content": "hi"}])})
    assert status == 404, body
    last = ready.json("endpoints", "detach", eid, MODEL_NAME)
    assert last["phase"] == "DELETING", last
    wait_for(lambda: ready.json("endpoints", "get", eid)["phase"] == "DELETED", 60, "the endpoint to go")
    assert eid not in claims(ready) and not os.path.exists(f"/proc/{pid}")


def test_a_candidate_whose_base_is_not_served_gets_an_endpoint_of_its_own(ready):
    run = start_run_id(ready, plan_text(2))
    ready("runs", "wait", run, "--timeout", "10m", "--exit-status", "-q", check=True)
    e = ready.json("endpoints", "create", "--model", run, "--wait", "--timeout", "5m")
    assert e["phase"] == "READY" and served(ready, e["endpointId"]) == [(run, "adapter", True)], e
    assert "attachedModel" not in e
    # Only the attached model is served through trainerd, though its base is resident.
    status, body = post(f"{ready.url}/v1/endpoints/{e['endpointId']}/v1/chat/completions",
                        {"model": MODEL_NAME, **chat([{"role": "user", "content": "hi"}])})
    assert status == 404 and body["error"]["code"] == "model_not_found", body
    ready("endpoints", "delete", e["endpointId"], check=True)
    wait_for(lambda: ready.json("endpoints", "get", e["endpointId"])["phase"] == "DELETED", 60, "the endpoint to go")


def test_info_says_what_an_endpoint_of_this_deployment_can_serve(ready):
    # The deployment's limits (trainerd's defaults here: no pools, limits or serving section given).
    info = ready.json("endpoints", "info")
    assert info["maxAdapterRank"] == 64 and info["maxAdaptersLoaded"] == 4 and info["devicesPerEndpoint"] == 1
    assert info["deviceType"] == "cpu" and info["wholeWeightModels"] is False
    assert ready("endpoints", "info", "--jq", ".maxAdapterRank", check=True).stdout.strip() == "64"
    text = ready("endpoints", "info", check=True).stdout
    assert "Max adapter rank:       64" in text and "Device type:            cpu" in text
