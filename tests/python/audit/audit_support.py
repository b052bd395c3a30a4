"""Helpers of the telemetry audit (issue 15): the registry, a real Prometheus, a capturing OTLP
receiver that forwards to trainerd, /metrics parsing, and the audit table itself.

Not a conftest.py: tests/python already has one of that name.
"""
from __future__ import annotations

import dataclasses
import http.server
import json
import math
import pathlib
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "tools"))
from auth import job_credentials, token_for  # noqa: E402
from gen_telemetry import prometheus_name  # noqa: E402  (the registry's own name translation)

REGISTRY = yaml.safe_load((REPO / "telemetry" / "registry.yaml").read_text())
METRICS = {m["name"]: m for m in REGISTRY["metrics"]}
BY_PROM = {prometheus_name(m): m["name"] for m in REGISTRY["metrics"]}
PREFIX = "akka.optimize.training."
LABEL_PREFIX = "akka_optimize_training_"


def short(name: str) -> str:
    return name.removeprefix(PREFIX)


def wait_for(what, predicate, timeout=120.0, interval=0.25):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        try:
            last = predicate()
            if last:
                return last
        except (OSError, ValueError) as error:
            last = error
        time.sleep(interval)
    pytest.fail(f"timed out waiting for {what}; last: {last!r}")


def get_text(url: str) -> str:
    with urllib.request.urlopen(url, timeout=30) as r:
        return r.read().decode()


def get_json(url: str):
    return json.loads(get_text(url))


# ---- the Prometheus text exposition ------------------------------------------------------------

@dataclasses.dataclass
class Sample:
    name: str      # the sample's name (with _bucket/_sum/_count)
    labels: dict   # label names without the akka_optimize_training_ prefix
    value: float


def parse_exposition(text: str) -> tuple[dict, list[Sample]]:
    """({family: TYPE}, samples)."""
    types, samples = {}, []
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
            continue
        if not line or line.startswith("#"):
            continue
        if "{" in line:
            name, rest = line.split("{", 1)
            body, value = rest.rsplit("}", 1)
            labels = {k.removeprefix(LABEL_PREFIX): bytes(v, "utf-8").decode("unicode_escape")
                      for k, v in re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', body)}
        else:
            name, value = line.split(" ", 1)
            labels = {}
        samples.append(Sample(name, labels, float(value.strip().split(" ")[0])))
    return types, samples


def family_of(sample_name: str, types: dict) -> str:
    if sample_name in types:
        return sample_name
    for suffix in ("_bucket", "_sum", "_count"):
        if sample_name.endswith(suffix) and sample_name[: -len(suffix)] in types:
            return sample_name[: -len(suffix)]
    return sample_name


def select(samples: list[Sample], name: str, **labels) -> list[Sample]:
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


# ---- a real Prometheus scraping trainerd every second ------------------------------------------

class Prometheus:
    def __init__(self, tmp: pathlib.Path, target_url: str, port: int):
        binary = shutil.which("prometheus")
        if binary is None:
            pytest.fail("the prometheus server is not installed: run tools/setup (Debian package prometheus)")
        config = tmp / "prometheus.yml"
        config.write_text(f"""
global: {{scrape_interval: 1s, evaluation_interval: 1s}}
scrape_configs:
  - job_name: trainerd
    scrape_interval: 1s
    authorization: {{credentials: "{token_for(target_url)}"}}
    static_configs: [{{targets: ["{target_url.removeprefix('http://')}"]}}]
""")
        self.log = open(tmp / "prometheus.log", "w")
        self.proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp / 'tsdb'}",
                                      f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                                     stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{port}"
        wait_for("prometheus to be ready", lambda: self.proc.poll() is None and
                 urllib.request.urlopen(f"{self.url}/-/ready", timeout=2).status == 200)
        wait_for("a successful scrape of trainerd", lambda: self.query('up{job="trainerd"} == 1'))

    def query(self, promql: str) -> list:
        body = get_json(f"{self.url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}))
        assert body["status"] == "success", body
        return body["data"]["result"]

    def names(self) -> list[str]:
        return get_json(f"{self.url}/api/v1/label/__name__/values")["data"]

    def stop(self):
        self.proc.terminate()
        self.proc.wait(timeout=30)
        self.log.close()


# ---- the job's OTLP, captured on its way to trainerd -------------------------------------------

class OtlpCapture:
    """An OTLP/HTTP receiver that keeps every push and forwards it to trainerd's /otlp route, so
    the job's own export is audited and trainerd's /metrics still carries the job's series."""

    def __init__(self):
        self.pushes: list[tuple[float, dict]] = []
        self.forward_to = ""
        self.data_dir: pathlib.Path | None = None  # trainerd's: its store keeps the attempts' tokens
        capture = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                capture.pushes.append((time.time(), json.loads(body)))
                # trainerd's route takes a job attempt's credentials only, and a job sends them to
                # trainerd alone (never to a collector): the forwarder finds them in trainerd's store.
                credentials = capture.credentials_of(json.loads(body))
                req = urllib.request.Request(capture.forward_to + "/otlp/v1/metrics", data=body, method="POST",
                                             headers={"Content-Type": "application/json", **credentials})
                try:
                    with urllib.request.urlopen(req, timeout=10) as r:
                        code, out = r.status, r.read()
                except urllib.error.HTTPError as e:
                    code, out = e.code, e.read()
                self.send_response(code)
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()

    def metrics_of_push(self, push: dict) -> dict:
        """{metric name: the OTLP metric object} of one push (one resource, one scope)."""
        out = {}
        for rm in push["resourceMetrics"]:
            for sm in rm["scopeMetrics"]:
                for m in sm["metrics"]:
                    out[m["name"]] = m
        return out

    @staticmethod
    def resource_of(push: dict) -> dict:
        attrs = push["resourceMetrics"][0]["resource"]["attributes"]
        return {a["key"]: otlp_value(a["value"]) for a in attrs}

    def credentials_of(self, push: dict) -> dict:
        """X-Trainer-Job and the Bearer token of the attempt whose resource `push` names, from the
        store of trainerd (`data_dir`); {} before it is known."""
        if self.data_dir is None:
            return {}
        resource = self.resource_of(push)
        job_id = f"{resource['akka.optimize.training.run.id']}-{resource['akka.optimize.training.run.attempt']}"
        return job_credentials(self.data_dir, job_id)


def otlp_value(v: dict):
    (kind, value), = v.items()
    if kind == "intValue":
        return int(value)
    return value


def otlp_kind(metric: dict) -> str:
    """The registry's kind of an OTLP metric object ('gauge', 'counter', 'histogram', ...)."""
    if "gauge" in metric:
        return "gauge"
    if "sum" in metric:
        s = metric["sum"]
        return "counter" if s.get("isMonotonic") and s.get("aggregationTemporality") == 2 else "sum(?)"
    if "histogram" in metric:
        return "histogram"
    if "exponentialHistogram" in metric:
        return "histogram(exponential)"
    return "?"


def otlp_points(metric: dict) -> list[dict]:
    for key in ("gauge", "sum", "histogram", "exponentialHistogram"):
        if key in metric:
            return metric[key]["dataPoints"]
    return []


def point_attrs(point: dict) -> dict:
    return {short(a["key"]): otlp_value(a["value"]) for a in point.get("attributes", [])}


def point_value(point: dict):
    if "asInt" in point:
        return int(point["asInt"])
    return point.get("asDouble")


# ---- the audit table ---------------------------------------------------------------------------

def close(a, b, rel=1e-9, abs_tol=0.0) -> bool:
    if a is None or b is None:
        return a is None and b is None
    return math.isclose(float(a), float(b), rel_tol=rel, abs_tol=abs_tol)


@dataclasses.dataclass
class Row:
    metric: str
    kind: str
    unit: str
    attributes: str
    observed: str
    expected: str
    compared_with: str
    ok: bool


class Audit:
    """Collects one row per check; fails at the end with every mismatch, not the first."""

    def __init__(self):
        self.rows: list[Row] = []
        self.audited: set[str] = set()

    def check(self, metric: str, attributes: str, observed, expected, compared_with: str, ok: bool | None = None,
              covers: bool = True):
        """One row. `covers`: the row compares the metric's value with an independent figure (a
        declaration check alone does not count as auditing a metric)."""
        m = METRICS[metric]
        if ok is None:
            ok = observed == expected if not isinstance(expected, float) else close(observed, expected)
        if covers:
            self.audited.add(metric)
        self.rows.append(Row(short(metric), m["kind"] + ("" if m["kind"] != "histogram" else f" ({m['histogram']})"),
                             m["unit"], attributes, fmt(observed), fmt(expected), compared_with, bool(ok)))

    def failures(self) -> list[Row]:
        return [r for r in self.rows if not r.ok]

    def markdown(self) -> str:
        out = ["| metric | kind | unit | attributes | observed | expected | compared with | result |",
               "|---|---|---|---|---|---|---|---|"]
        for r in self.rows:
            cells = [f"`{r.metric}`", r.kind, f"`{r.unit}`", r.attributes, r.observed, r.expected, r.compared_with,
                     "ok" if r.ok else "**MISMATCH**"]
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        return "\n".join(out) + "\n"


def fmt(v) -> str:
    if v is None:
        return "absent"
    if isinstance(v, float):
        return f"{v:.6g}"
    return str(v)
