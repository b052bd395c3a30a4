"""Debian's real Prometheus scrapes the demo exporter's /metrics; PromQL through Prometheus's
HTTP API returns what the exporter recorded (see tests/unit/telemetry/demo_exporter.cpp).

Twice: a default Prometheus, which scrapes the text format (exponential histograms as classic
buckets), and one with native histograms enabled, which negotiates the protobuf format
(exponential histograms as native histograms)."""
import shutil
import subprocess
import time

import pytest
import requests

from telemetry_support import demo_exporter, free_port  # noqa: F401  (fixture)


def wait_for(what, predicate, timeout=45.0, interval=0.5):
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


@pytest.fixture(scope="module", params=["text", "native"])
def prometheus(request, demo_exporter, tmp_path_factory):  # noqa: F811
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus server is not installed: run tools/setup (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    exporter_port = free_port()
    exporter = subprocess.Popen([str(demo_exporter), "--port", str(exporter_port)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert exporter.stdout.readline().startswith("listening"), "demo exporter did not start"
    config = tmp / "prometheus.yml"
    config.write_text(f"""
global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: demo
    scrape_interval: 1s
    static_configs:
      - targets: ["127.0.0.1:{exporter_port}"]
""")
    port = free_port()
    log = open(tmp / "prometheus.log", "w")
    flags = ["--enable-feature=native-histograms"] if request.param == "native" else []
    server = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn", *flags],
                              stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for("prometheus to be ready", lambda: server.poll() is None and
                 requests.get(f"{url}/-/ready", timeout=2).status_code == 200)
        # Enough scrapes for a rate over 5 s.
        wait_for("6 scrapes of the demo exporter",
                 lambda: query(url, 'count_over_time(up{job="demo"}[1m]) >= 6'), timeout=60)
        yield request.param, url
    finally:
        server.terminate()
        exporter.terminate()
        server.wait(timeout=30)
        exporter.wait(timeout=30)
        log.close()
        if server.returncode not in (0, -15):
            print((tmp / "prometheus.log").read_text())


def query(url, promql):
    response = requests.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5)
    body = response.json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def test_the_target_is_up(prometheus):
    _, prometheus = prometheus
    result = query(prometheus, 'up{job="demo"}')
    assert [float(r["value"][1]) for r in result] == [1.0]


def test_counter_rate(prometheus):
    _, prometheus = prometheus
    # The exporter adds 1 to sft.step.count every 100 ms.
    result = query(prometheus, "rate(akka_optimize_training_sft_step_count_total[5s])")
    assert len(result) == 1, result
    assert 8.0 <= float(result[0]["value"][1]) <= 12.0, result
    # The stalled-loop alert's expression is well formed and sees progress.
    assert query(prometheus, "increase(akka_optimize_training_sft_step_count_total[5s]) == 0") == []


def test_gauge_with_its_attributes(prometheus):
    _, prometheus = prometheus
    result = query(prometheus, "akka_optimize_training_pool_claims")
    series = {r["metric"]["akka_optimize_training_claim_state"]: r for r in result}
    assert set(series) == {"GRANTED", "QUEUED"}
    assert float(series["GRANTED"]["value"][1]) == 3.0
    assert float(series["QUEUED"]["value"][1]) == 2.0
    labels = series["QUEUED"]["metric"]
    assert labels["akka_optimize_training_instance"] == "demo-0"
    assert labels["akka_optimize_training_pool_accelerator"] == "nvidia-l4"
    assert labels["akka_optimize_training_pool_serving"] == "false"
    by_state = query(prometheus, 'sum by (akka_optimize_training_claim_state) '
                                 '(akka_optimize_training_pool_claims{akka_optimize_training_claim_state="GRANTED"})')
    assert float(by_state[0]["value"][1]) == 3.0


def test_explicit_histogram_quantile(prometheus):
    _, prometheus = prometheus
    # 1000 step durations i/1000 s: the median is 0.5 s, the 90th percentile 0.9 s.
    for q, expected in ((0.5, 0.5), (0.9, 0.9)):
        result = query(prometheus, f"histogram_quantile({q}, "
                                   "sum by (le) (akka_optimize_training_sft_step_duration_seconds_bucket))")
        assert abs(float(result[0]["value"][1]) - expected) < 1e-6, result
    count = query(prometheus, "akka_optimize_training_sft_step_duration_seconds_count")
    assert float(count[0]["value"][1]) == 1000


def test_exponential_histogram_quantile(prometheus):
    # Completion lengths 1..1000 tokens on an exponential histogram (scale 3: buckets 9% wide).
    mode, prometheus = prometheus
    name = "akka_optimize_training_rl_completion_length"
    if mode == "text":  # classic buckets
        series = f"sum by (le) ({name}_bucket)"
        count, total = f"{name}_count", f"{name}_sum"
        assert query(prometheus, f"{name}_bucket"), "classic buckets expected in the text format"
    else:  # a native histogram: no _bucket series
        series = name
        count, total = f"histogram_count({name})", f"histogram_sum({name})"
        assert query(prometheus, f"{name}_bucket") == [], "the protobuf format carries a native histogram"
    for q, expected in ((0.5, 500), (0.99, 990)):
        result = query(prometheus, f"histogram_quantile({q}, {series})")
        value = float(result[0]["value"][1])
        assert abs(value - expected) / expected < 0.09, (mode, q, value)
    assert float(query(prometheus, count)[0]["value"][1]) == 1000
    assert float(query(prometheus, total)[0]["value"][1]) == 500500


def test_resource_attributes_as_target_info(prometheus):
    _, prometheus = prometheus
    result = query(prometheus, "target_info")
    assert len(result) == 1
    labels = result[0]["metric"]
    assert labels["service_name"] == "trainer-job"
    assert labels["akka_optimize_training_run_id"] == "commit-router-7f3a"
    assert labels["akka_optimize_training_run_attempt"] == "2"
