"""An endpoint outlives a SIGKILLed trainerd (issue 24): the restarted trainerd keeps its SERVING
claim and follows the same serving process, which still answers through it; deleting it then
stops that process although it is no longer trainerd's child."""
from __future__ import annotations

import signal
import time

from serving_processes import serving_pids

CHAT = {"messages": [{"role": "user", "content": "hello"}], "temperature": 0, "max_tokens": 4}


def wait_endpoint(d, eid: str, phase: str, timeout: float = 120) -> dict:
    deadline = time.time() + timeout
    while time.time() < deadline:
        e = d.ok(d.get(f"/v1/endpoints/{eid}"))
        if e["phase"] == phase:
            return e
        assert e["phase"] not in ("FAILED", "DELETED") or phase in ("FAILED", "DELETED"), e
        time.sleep(0.2)
    raise AssertionError(f"endpoint {eid} did not become {phase}")


def test_a_ready_endpoint_survives_a_killed_trainerd_and_is_deleted_after(start_trainerd, setup_basics):
    d = start_trainerd(job="real")
    setup_basics(d)
    eid = d.ok(d.post("/v1/endpoints", {"model": "tiny/qwen3", "workload": "triage"}), 201)["endpointId"]
    wait_endpoint(d, eid, "READY")
    [pid] = serving_pids(eid)
    before = d.ok(d.post(f"/v1/endpoints/{eid}/v1/chat/completions", CHAT))

    d.kill(signal.SIGKILL)
    d.start(port=int(d.url.rsplit(":", 1)[1]))
    claims = {c["owner"]: c for c in d.capacity()["claims"]}
    assert claims[eid]["kind"] == "SERVING" and claims[eid]["state"] == "GRANTED", claims
    assert d.ok(d.get(f"/v1/endpoints/{eid}"))["phase"] == "READY"
    assert serving_pids(eid) == [pid]
    after = d.ok(d.post(f"/v1/endpoints/{eid}/v1/chat/completions", CHAT))
    assert after["choices"][0]["message"]["content"] == before["choices"][0]["message"]["content"]

    assert d.ok(d.request("DELETE", f"/v1/endpoints/{eid}"), 202)["phase"] == "DELETING"
    wait_endpoint(d, eid, "DELETED", 60)
    assert serving_pids(eid) == [], f"serving process {pid} still runs"
    assert eid not in {c["owner"] for c in d.capacity()["claims"]}
