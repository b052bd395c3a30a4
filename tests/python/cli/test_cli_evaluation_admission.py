"""Evaluations admitted like runs (issue 12): each claims a device of the pool a one-device run
would take, against its workload's quota; it waits QUEUED while the pool or the quota is full,
runs when admission grants it, releases the claim when it ends, and reports the device time it
held. Through the real CLI against a real trainerd whose only pool is one CPU slot."""
from __future__ import annotations

import json
import urllib.request

from cli_support import MODEL_NAME, WORKLOAD, plan_text, wait_for

MAX_NEW = 4


def claims(cli) -> list[dict]:
    return cli.json("capacity")["claims"]


def test_an_evaluation_waits_for_the_device_a_run_holds_then_runs_and_releases_it(ready):
    run = ready("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan_text(2000), check=True).stdout.strip()
    wait_for(lambda: ready.json("runs", "get", run)["phase"] == "TRAINING", 300, "the run to train")
    started = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", WORKLOAD,
                         "--dataset", "sentiment-train", "--max-new-tokens", MAX_NEW)
    eid = started["evaluationId"]
    queued = ready.json("evaluations", "get", eid)
    assert queued["phase"] == "QUEUED", queued
    assert queued["claim"]["pool"] == "cpu" and queued["claim"]["state"] == "QUEUED" and queued["claim"]["devices"] == 1
    held = {c["owner"]: c for c in claims(ready)}
    assert held[run]["state"] == "GRANTED" and held[eid]["kind"] == "EVALUATION" and held[eid]["state"] == "QUEUED"
    text = ready("evaluations", "get", eid, check=True).stdout
    assert "waiting for 1 device(s) of pool cpu" in text, text

    ready("runs", "cancel", run, "--force", check=True)
    done = ready.json("evaluations", "wait", eid, "-q", "--timeout", "10m")
    assert done["phase"] == "COMPLETED", done
    cost = done["cost"]
    assert cost["pool"] == "cpu" and cost["devices"] == 1
    assert cost["gpuSeconds"] == 0  # a CPU slot's time is not GPU time
    assert cost["deviceSeconds"] == cost["seconds"] > 0
    assert claims(ready) == []


def set_quota(cli, workload: str, quota: int) -> None:
    req = urllib.request.Request(f"{cli.url}/v1/workloads/{workload}", method="PATCH",
                                 data=json.dumps({"gpuQuota": quota}).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=10) as r:
        assert r.status == 200


def test_an_evaluation_counts_against_its_workloads_quota_and_a_queued_one_cancels_cleanly(ready):
    ready("workloads", "create", "no-quota", "--gpu-quota", 0, check=True)
    first = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", "no-quota",
                       "--dataset", "sentiment-train", "--max-new-tokens", MAX_NEW)
    second = ready.json("evaluations", "start", "--model", MODEL_NAME, "--workload", "no-quota",
                        "--dataset", "sentiment-train", "--max-new-tokens", MAX_NEW)
    # The pool is free, the quota is not: both wait.
    for e in (first, second):
        assert ready.json("evaluations", "get", e["evaluationId"])["phase"] == "QUEUED"
    assert {c["owner"] for c in claims(ready)} == {first["evaluationId"], second["evaluationId"]}

    cancelled = ready("evaluations", "cancel", second["evaluationId"], "--force", check=True)
    assert cancelled.returncode == 0
    assert ready.json("evaluations", "get", second["evaluationId"])["phase"] == "CANCELLED"
    assert [c["owner"] for c in claims(ready)] == [first["evaluationId"]]

    set_quota(ready, "no-quota", 1)
    done = ready.json("evaluations", "wait", first["evaluationId"], "-q", "--timeout", "10m")
    assert done["phase"] == "COMPLETED" and done["cost"]["devices"] == 1
    assert claims(ready) == []
