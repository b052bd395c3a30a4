"""Job telemetry that reaches the operator with no setup (issue 9) and GPU time while a claim is held
(issue 15, service side).

trainerd gives each job TRAINER_OTLP_ENDPOINT = its own loopback /otlp route; the job pushes its
OTLP there and trainerd serves the job's series, labelled with the run's id and attempt, on its own
/metrics after the service's series, until a (configurable) while after the run ended. Debian's
real Prometheus scrapes trainerd every second during real runs of trainer-job on the tiny model.
"""
import json
import os
import pathlib
import shutil
import signal
import socket
import subprocess
import time

import pytest
import requests

from auth import job_credentials, token_for
from service_helpers import metric_value, plan

STEP_COUNT = "akka_optimize_training_sft_step_count_total"
GPU_TIME = "akka_optimize_training_cost_gpu_time_seconds_total"
RETENTION = 15  # telemetry.jobSeriesRetentionSeconds of these tests
TELEMETRY = {"otlpIntervalMs": 1000, "jobSeriesRetentionSeconds": RETENTION}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(what, predicate, timeout=120.0, interval=0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except requests.RequestException as error:
            last = error
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {what}; last: {last!r}")


def series_of(text: str, run_id: str) -> list[str]:
    """The sample lines of /metrics that carry `run_id`."""
    needle = f'akka_optimize_training_run_id="{run_id}"'
    return [line for line in text.splitlines() if not line.startswith("#") and needle in line]


def type_lines(text: str) -> list[str]:
    return [line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")]


def job_pids(data_dir: pathlib.Path, run_id: str) -> list[int]:
    """Pids of the trainer-job processes of `run_id` (their command lines name the run's folder)."""
    needle = str(data_dir / "runs" / run_id)
    pids = []
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if needle in cmdline and "trainer-job" in cmdline:
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def prometheus(tmp_path):
    """prometheus(target_url) -> the base URL of a real Prometheus scraping `target_url`'s /metrics every 1 s."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus server is not installed: run tools/setup (Debian package prometheus)")
    started = []

    def start(target_url: str) -> str:
        target = target_url.removeprefix("http://")
        config = tmp_path / "prometheus.yml"
        config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: trainerd
    scrape_interval: 1s
    authorization: {{credentials: "{token_for(target_url)}"}}
    static_configs:
      - targets: ["{target}"]
""")
        port = free_port()
        log = open(tmp_path / "prometheus.log", "w")
        server = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                                   f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                  stdout=log, stderr=subprocess.STDOUT)
        started.append((server, log))
        url = f"http://127.0.0.1:{port}"
        wait_for("prometheus to be ready", lambda: server.poll() is None and
                 requests.get(f"{url}/-/ready", timeout=2).status_code == 200)
        wait_for("a successful scrape of trainerd", lambda: [r for r in query(url, 'up{job="trainerd"} == 1')])
        return url

    yield start
    for server, log in started:
        server.terminate()
        server.wait(timeout=30)
        log.close()


def query(url: str, promql: str) -> list:
    response = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    body = response.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_prometheus_scraping_trainerd_sees_each_runs_job_metrics_by_run_id(start_trainerd, setup_basics,
                                                                          prometheus):
    d = start_trainerd(job="real", telemetry=TELEMETRY,
                       pools=[{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}])
    setup_basics(d)
    prom = prometheus(d.url)
    # Two concurrent runs of different lengths: their step counters tell them apart.
    runs = {d.ok(d.post("/v1/runs", plan(steps=steps)), 201)["runId"]: steps for steps in (3, 6)}
    for run_id in runs:
        done = d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)
        assert done["phase"] == "COMPLETED", json.dumps(done, indent=1)[:3000]

    # trainerd's own /metrics carries each job's series with its run id and attempt, and the
    # exposition stays one family per name (a second TYPE line for a name is refused by parsers).
    text = d.get("/metrics").raw.decode()
    assert len(type_lines(text)) == len(set(type_lines(text))), text
    for run_id, steps in runs.items():
        assert metric_value(text, STEP_COUNT, run_id=run_id, run_attempt="1") == steps, series_of(text, run_id)

    # PromQL by run id returns that run's values (the last scraped before the series went).
    for run_id, steps in runs.items():
        selector = f'{{akka_optimize_training_run_id="{run_id}"}}'
        result = wait_for(f"run {run_id}'s step counter in Prometheus",
                          lambda: query(prom, f"max_over_time({STEP_COUNT}{selector}[10m]) == {steps}"))
        assert len(result) == 1, result
        labels = result[0]["metric"]
        assert labels["akka_optimize_training_run_id"] == run_id
        assert labels["akka_optimize_training_run_attempt"] == "1"
        loss = query(prom, f'last_over_time(akka_optimize_training_sft_loss{selector}[10m])')
        assert len(loss) == 1 and float(loss[0]["value"][1]) > 0, loss
        # ... and it is one of the run's own step losses, as trainerd stored them.
        value = float(loss[0]["value"][1])
        stored = d.ok(d.get(f"/v1/runs/{run_id}/metrics"), 200)["steps"]
        assert any(abs(value - s["loss"]) <= 1e-9 * max(1.0, s["loss"]) for s in stored), (value, stored)

    # The ended runs' series leave trainerd's /metrics once the retention after their end passed.
    for run_id in runs:
        wait_for(f"run {run_id}'s series to leave /metrics",
                 lambda: not series_of(d.get("/metrics").raw.decode(), run_id), timeout=RETENTION + 120)
    text = d.get("/metrics").raw.decode()
    assert metric_value(text, "akka_optimize_training_run_phase_entries_total", run_phase="COMPLETED") == 2


def test_a_job_killed_early_still_left_its_series(start_trainerd, setup_basics):
    d = start_trainerd(job="real", telemetry=TELEMETRY)
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan(steps=5000, max_attempts=1)), 201)["runId"]
    d.wait_phase(run_id, "TRAINING", timeout=600)
    wait_for("the first step", lambda: d.run(run_id)["progress"].get("step", 0) >= 1, timeout=300)
    pids = job_pids(d.data_dir, run_id)
    assert pids, "the run's trainer-job process was not found"
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    done = d.wait_phase(run_id, {"FAILED", "COMPLETED", "CANCELLED"}, timeout=120)
    assert done["phase"] == "FAILED", done
    text = d.get("/metrics").raw.decode()
    lines = series_of(text, run_id)
    assert lines, "a job killed during training left no series on /metrics"
    assert metric_value(text, STEP_COUNT, run_id=run_id) is not None, lines
    wait_for("the killed run's series to leave /metrics",
             lambda: not series_of(d.get("/metrics").raw.decode(), run_id), timeout=RETENTION + 120)


def test_a_job_whose_metrics_go_to_a_collector_leaves_no_series_on_trainerd(start_trainerd, setup_basics):
    # The operator's collector takes precedence; nothing listens there, and the run still trains.
    d = start_trainerd(job="real", telemetry={"otlpEndpoint": f"http://127.0.0.1:{free_port()}",
                                              "otlpIntervalMs": 1000})
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan(steps=3)), 201)["runId"]
    assert d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=600)["phase"] == "COMPLETED"
    assert series_of(d.get("/metrics").raw.decode(), run_id) == []


def job_headers(d, run_id: str) -> dict:
    """The credentials of the run's current job attempt (X-Trainer-Job, Bearer TRAINER_JOB_TOKEN), from the store."""
    def current():
        run = d.run(run_id)
        return job_credentials(d.data_dir, f"{run_id}-{run['attempt']}")
    return wait_for(f"run {run_id}'s job attempt", current)


def push_of(run_id: str, *metrics) -> dict:
    """An OTLP push of run `run_id`'s attempt 1 carrying `metrics`."""
    return {"resourceMetrics": [{
        "resource": {"attributes": [
            {"key": "akka.optimize.training.run.id", "value": {"stringValue": run_id}},
            {"key": "akka.optimize.training.run.attempt", "value": {"intValue": "1"}}]},
        "scopeMetrics": [{"scope": {"name": "job"}, "metrics": list(metrics)}]}]}


def held_runs(d, setup_basics, standin_behaviour, n: int = 1) -> list[str]:
    """`n` runs whose stand-in jobs stay QUEUED, their attempts' tokens live."""
    standin_behaviour(queueSeconds=3600)
    setup_basics(d)
    runs = [d.ok(d.post("/v1/runs", plan()), 201)["runId"] for _ in range(n)]
    for run_id in runs:
        d.wait_phase(run_id, "QUEUED")
    return runs


def test_the_otlp_route_refuses_a_malformed_push_naming_the_field(start_trainerd, setup_basics, standin_behaviour):
    d = start_trainerd()
    [run_id] = held_runs(d, setup_basics, standin_behaviour)
    job = job_headers(d, run_id)
    reply = d.request("POST", "/otlp/v1/metrics", raw=b"", headers=job)
    assert reply.status == 400 and reply.json["error"]["field"] == "body", reply
    reply = d.request("POST", "/otlp/v1/metrics", raw=b'{"resourceMetrics": 3}', headers=job)
    assert reply.status == 400, reply
    assert reply.json["error"]["field"] == "body.resourceMetrics", reply
    reply = d.request("POST", "/otlp/v1/metrics", raw=b"[[[[", headers=job)
    assert reply.status == 400 and reply.json["error"]["field"].startswith("body"), reply
    # A well-formed push of a resource without a run id is refused too: the relay keys by run.
    push = {"resourceMetrics": [{"resource": {"attributes": []}, "scopeMetrics": []}]}
    reply = d.request("POST", "/otlp/v1/metrics", push, headers=job)
    assert reply.status == 400 and "run.id" in reply.json["error"]["message"], reply


def test_the_otlp_route_takes_a_jobs_own_runs_metrics_only(start_trainerd, setup_basics, standin_behaviour):
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}])  # a job each
    run_a, run_b = held_runs(d, setup_basics, standin_behaviour, n=2)
    as_a = job_headers(d, run_a)
    point = {"asDouble": 5.0, "timeUnixNano": str(time.time_ns()), "attributes": []}
    loss = {"name": "akka.optimize.training.sft.loss", "unit": "{loss}", "gauge": {"dataPoints": [point]}}
    # No credentials: 401, even with the admin's API token (operators do not push jobs' metrics).
    reply = d.request("POST", "/otlp/v1/metrics", push_of(run_a, loss), headers={"Authorization": ""})
    assert reply.status == 401 and reply.json["error"]["field"] == "X-Trainer-Job", reply
    reply = d.post("/otlp/v1/metrics", push_of(run_a, loss))  # the local admin token only
    assert reply.status == 401, reply
    # A's job pushing B's run: 403 naming the resource; nothing of B appears.
    reply = d.request("POST", "/otlp/v1/metrics", push_of(run_b, loss), headers=as_a)
    assert reply.status == 403, reply
    assert reply.json["error"]["field"] == "body.resourceMetrics[0].resource", reply
    assert run_a in reply.json["error"]["message"] and run_b in reply.json["error"]["message"], reply
    # A's token under B's job id: 403; an attempt that does not exist: 401.
    reply = d.request("POST", "/otlp/v1/metrics", push_of(run_b, loss),
                      headers={**as_a, "X-Trainer-Job": f"{run_b}-1"})
    assert reply.status == 403 and reply.json["error"]["field"] == "X-Trainer-Job", reply
    reply = d.request("POST", "/otlp/v1/metrics", push_of(run_a, loss), headers={**as_a, "X-Trainer-Job": "feed-1"})
    assert reply.status == 401, reply
    text = d.get("/metrics").raw.decode()
    assert metric_value(text, "akka_optimize_training_sft_loss", run_id=run_b) is None
    assert metric_value(text, "akka_optimize_training_sft_loss", run_id=run_a) is None
    # A's own: taken.
    reply = d.request("POST", "/otlp/v1/metrics", push_of(run_a, loss), headers=as_a)
    assert reply.status == 200, reply
    assert metric_value(d.get("/metrics").raw.decode(), "akka_optimize_training_sft_loss", run_id=run_a) == 5.0


def test_a_pushed_series_named_like_a_service_metric_does_not_make_a_second_family(start_trainerd, setup_basics,
                                                                                   standin_behaviour):
    d = start_trainerd()
    [run_id] = held_runs(d, setup_basics, standin_behaviour)
    point = {"asDouble": 7.0, "timeUnixNano": str(time.time_ns()), "attributes": []}
    push = push_of(run_id,
                   {"name": "akka.optimize.training.pool.devices.declared", "unit": "{device}",
                    "gauge": {"dataPoints": [point]}},
                   {"name": "akka.optimize.training.sft.loss", "unit": "{loss}", "gauge": {"dataPoints": [point]}})
    reply = d.request("POST", "/otlp/v1/metrics", push, headers=job_headers(d, run_id))
    assert reply.status == 200, reply
    text = d.get("/metrics").raw.decode()
    names = type_lines(text)
    assert len(names) == len(set(names)), names
    assert "akka_optimize_training_pool_devices_declared" in names
    assert metric_value(text, "akka_optimize_training_sft_loss", run_id=run_id) == 7.0
    # The service's own family stays the service's: the job's point is not in it.
    assert metric_value(text, "akka_optimize_training_pool_devices_declared", run_id=run_id) is None


def test_gpu_time_grows_while_a_gpu_claim_is_held_and_a_cpu_pool_adds_none(start_trainerd, setup_basics,
                                                                         standin_behaviour):
    standin_behaviour(steps=200, stepSeconds=0.05)
    d = start_trainerd(pools=[{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1},
                              {"name": "gpu", "accelerator": "nvidia-h100-80gb", "declared": 2, "maxClaim": 2}])
    setup_basics(d)
    run_id = d.ok(d.post("/v1/runs", plan(gpus=2)), 201)["runId"]
    d.wait_phase(run_id, "TRAINING")

    def gpu_time():
        return metric_value(d.get("/metrics").raw.decode(), GPU_TIME, workload="triage",
                            pool_accelerator="nvidia-h100-80gb", gpu_derived="true") or 0.0

    first = wait_for("GPU time while the claim is held", gpu_time, timeout=60)
    second = wait_for("GPU time to grow while the claim is held", lambda: gpu_time() > first, timeout=60)
    assert second and d.run(run_id)["phase"] == "TRAINING", "the run ended before GPU time was seen to grow"
    done = d.wait_phase(run_id, {"COMPLETED", "FAILED", "CANCELLED"}, timeout=120)
    assert done["phase"] == "COMPLETED", done
    # Settled at the end: two devices for the job's whole life, published once in all.
    total = gpu_time()
    assert total >= first
    assert abs(total - done["cost"]["gpuSeconds"]) <= 1e-6 * max(1.0, total), (total, done["cost"])

    # A CPU run's device-seconds are not GPU time.
    standin_behaviour(steps=3)
    cpu_run = d.ok(d.post("/v1/runs", plan(gpus=0)), 201)["runId"]
    done = d.wait_phase(cpu_run, {"COMPLETED", "FAILED", "CANCELLED"})
    assert done["phase"] == "COMPLETED", done
    text = d.get("/metrics").raw.decode()
    assert (metric_value(text, GPU_TIME, pool_accelerator="cpu") or 0.0) == 0.0
    assert metric_value(text, GPU_TIME, workload="triage") == total
