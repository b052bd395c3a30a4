"""The demo exporter pushes OTLP/HTTP JSON to a real HTTP server in this test; each body parses
with opentelemetry-proto's ExportMetricsServiceRequest (protobuf's json_format, strict) and
every recorded value round-trips, exponential histograms included."""
import bisect
import http.server
import math
import subprocess
import threading

import pytest
import yaml
from google.protobuf import json_format
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.metrics.v1.metrics_pb2 import AggregationTemporality

from telemetry_support import REPO, demo_exporter  # noqa: F401  (fixture)

P = "akka.optimize.training."


class Receiver(http.server.ThreadingHTTPServer):
    def __init__(self):
        self.bodies = []
        self.paths = []
        self.content_types = []
        super().__init__(("127.0.0.1", 0), Handler)


class Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802
        length = int(self.headers["Content-Length"])
        self.server.bodies.append(self.rfile.read(length).decode("utf-8"))
        self.server.paths.append(self.path)
        self.server.content_types.append(self.headers["Content-Type"])
        reply = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def requests_received(demo_exporter):  # noqa: F811
    receiver = Receiver()
    thread = threading.Thread(target=receiver.serve_forever, daemon=True)
    thread.start()
    try:
        endpoint = f"http://127.0.0.1:{receiver.server_address[1]}/v1/metrics"
        result = subprocess.run([str(demo_exporter), "--otlp", endpoint, "--interval-ms", "200",
                                 "--duration-ms", "1100"], capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, result.stdout + result.stderr
    finally:
        receiver.shutdown()
    assert set(receiver.paths) == {"/v1/metrics"}
    assert set(receiver.content_types) == {"application/json"}
    parsed = []
    for body in receiver.bodies:
        request = ExportMetricsServiceRequest()
        json_format.Parse(body, request)  # strict: an unknown or mistyped field fails
        parsed.append(request)
    # Pushes every 200 ms for 1.1 s, and one more on stop.
    assert len(parsed) >= 5, len(parsed)
    return parsed


def attributes(key_values):
    out = {}
    for kv in key_values:
        which = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, which)
    return out


def metrics_by_name(request):
    (resource_metrics,) = request.resource_metrics
    (scope_metrics,) = resource_metrics.scope_metrics
    return {m.name: m for m in scope_metrics.metrics}


# ---- an independent model of OpenTelemetry's base-2 exponential histogram ----------------------

def bucket_index(value, scale):
    value = abs(value)
    mantissa, exponent = math.frexp(value)
    if scale <= 0:
        e = exponent - 1 - (1 if mantissa == 0.5 else 0)
        return e >> -scale
    if mantissa == 0.5:
        return ((exponent - 1) << scale) - 1
    index = math.ceil(math.log2(value) * 2 ** scale) - 1
    base = 2 ** (2 ** -scale)
    while base ** index >= value:
        index -= 1
    while base ** (index + 1) < value:
        index += 1
    return index


def expected_exponential(values, max_scale=20, max_size=160):
    """The scale is the largest at which each sign's index range fits max_size buckets."""
    nonzero = [v for v in values if v != 0]
    scale = max_scale
    while scale > -10:
        ok = True
        for sign in (1, -1):
            idx = [bucket_index(v, scale) for v in nonzero if (v > 0) == (sign > 0)]
            if idx and max(idx) - min(idx) + 1 > max_size:
                ok = False
        if ok:
            break
        scale -= 1

    def buckets(selected):
        if not selected:
            return 0, []
        idx = [bucket_index(v, scale) for v in selected]
        counts = [0] * (max(idx) - min(idx) + 1)
        for i in idx:
            counts[i - min(idx)] += 1
        return min(idx), counts

    return {
        "scale": scale,
        "zero_count": sum(1 for v in values if v == 0),
        "positive": buckets([v for v in values if v > 0]),
        "negative": buckets([v for v in values if v < 0]),
        "count": len(values), "sum": sum(values), "min": min(values), "max": max(values),
    }


def check_exponential(point, values):
    expected = expected_exponential(values)
    assert point.scale == expected["scale"]
    assert point.zero_count == expected["zero_count"]
    assert (point.positive.offset, list(point.positive.bucket_counts)) == expected["positive"]
    if expected["negative"][1]:
        assert (point.negative.offset, list(point.negative.bucket_counts)) == expected["negative"]
    else:
        assert list(point.negative.bucket_counts) == []
    assert point.count == expected["count"]
    assert point.sum == pytest.approx(expected["sum"], rel=1e-12)
    assert (point.min, point.max) == (expected["min"], expected["max"])


# ---- tests --------------------------------------------------------------------------------------

def test_resource_and_scope(requests_received):
    request = requests_received[-1]
    (resource_metrics,) = request.resource_metrics
    resource = attributes(resource_metrics.resource.attributes)
    assert resource["service.name"] == "trainer-job"
    assert resource[P + "run.id"] == "commit-router-7f3a"
    assert resource[P + "run.attempt"] == 2
    assert resource[P + "run.learning_rate"] == 0.0002
    assert resource[P + "run.lora_rank"] == 16
    assert resource[P + "pipeline.id"] == "support-triage-2026-09-01"
    assert P + "run.group_size" not in resource, "only on a reinforcement run"
    (scope_metrics,) = resource_metrics.scope_metrics
    assert (scope_metrics.scope.name, scope_metrics.scope.version) == ("trainer", "0.1.0")


def test_gauge_with_attributes(requests_received):
    metric = metrics_by_name(requests_received[-1])[P + "pool.claims"]
    assert (metric.unit, metric.description) == ("{claim}", "Number of active claims on a GPU pool, partitioned by claim state.")
    points = {attributes(p.attributes)[P + "claim.state"]: p for p in metric.gauge.data_points}
    assert points["GRANTED"].as_int == 3
    assert points["QUEUED"].as_int == 2
    assert attributes(points["QUEUED"].attributes) == {
        P + "claim.state": "QUEUED", P + "instance": "demo-0", P + "pool.accelerator": "nvidia-l4",
        P + "pool.serving": False}


def test_counters_are_cumulative_and_monotonic(requests_received):
    metrics = metrics_by_name(requests_received[-1])
    tokens = metrics[P + "rl.grader.tokens"].sum
    assert tokens.is_monotonic
    assert tokens.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    by_type = {attributes(p.attributes)[P + "rl.grader.token.type"]: p.as_int for p in tokens.data_points}
    assert by_type == {"input": 1234, "output": 567}
    cost = metrics[P + "cost.gpu.time"].sum.data_points[0]
    assert cost.as_double == 12.5
    assert attributes(cost.attributes) == {P + "workload": "support-triage", P + "pool.accelerator": "nvidia-l4",
                                           P + "gpu.derived": False}
    # The ticking step counter: non-decreasing across pushes, one start time, times after it.
    steps = []
    starts = set()
    for request in requests_received:
        point = metrics_by_name(request)[P + "sft.step.count"].sum.data_points[0]
        steps.append(point.as_int)
        starts.add(point.start_time_unix_nano)
        assert point.time_unix_nano >= point.start_time_unix_nano > 0
    assert steps == sorted(steps) and steps[-1] >= 8, steps
    assert len(starts) == 1


def test_explicit_histogram(requests_received):
    registry = yaml.safe_load((REPO / "telemetry" / "registry.yaml").read_text(encoding="utf-8"))
    bounds = next(m["buckets"] for m in registry["metrics"] if m["name"] == P + "sft.step.duration")
    values = [i / 1000 for i in range(1, 1001)]
    expected_counts = [0] * (len(bounds) + 1)
    for v in values:
        expected_counts[bisect.bisect_left(bounds, v)] += 1
    metric = metrics_by_name(requests_received[-1])[P + "sft.step.duration"]
    assert metric.unit == "s"
    assert metric.histogram.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    (point,) = metric.histogram.data_points
    assert list(point.explicit_bounds) == [float(b) for b in bounds]
    assert list(point.bucket_counts) == expected_counts
    assert point.count == 1000
    assert point.sum == pytest.approx(500.5, rel=1e-12)
    assert (point.min, point.max) == (0.001, 1.0)


def test_exponential_histograms(requests_received):
    metrics = metrics_by_name(requests_received[-1])
    lengths = metrics[P + "rl.completion.length"].exponential_histogram
    assert lengths.aggregation_temporality == AggregationTemporality.AGGREGATION_TEMPORALITY_CUMULATIVE
    check_exponential(lengths.data_points[0], list(range(1, 1001)))
    signed = metrics["demo.signed"].exponential_histogram.data_points[0]
    check_exponential(signed, [-3.5, -1.0, 0.0, 0.0, 0.25, 2.0, 1e6])


def test_gauges_without_attributes_and_a_nan(requests_received):
    metrics = metrics_by_name(requests_received[-1])
    (loss,) = metrics[P + "sft.loss"].gauge.data_points
    assert loss.as_double == 1.25 and list(loss.attributes) == []
    (validation,) = metrics[P + "sft.validation.loss"].gauge.data_points
    assert math.isnan(validation.as_double)
    assert P + "rl.step.count" not in metrics, "an SFT job publishes no RL metric it never used"
