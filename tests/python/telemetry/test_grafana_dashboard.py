"""The Grafana dashboard of docs/grafana/trainer.json (issue 27): what tools/gen_grafana.py writes,
import-ready (a datasource input, unique panel ids, panels that do not overlap), every metric
and label its queries name is one the registry generates (the Prometheus names trainerd's
exposition uses, and the attributes each metric carries), and Debian's real Prometheus evaluates
every query. That the queries return the series of a real run is checked where a run exists:
tests/python/audit/test_telemetry_audit.py."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest
import yaml

from telemetry_support import REPO, free_port

sys.path.insert(0, str(REPO / "tools"))
import gen_grafana  # noqa: E402
from gen_telemetry import prometheus_name  # noqa: E402

REGISTRY = yaml.safe_load((REPO / "telemetry" / "registry.yaml").read_text())
DASHBOARD = json.loads((REPO / "docs" / "grafana" / "trainer.json").read_text())
HISTOGRAM_SERIES = ("_bucket", "_sum", "_count")


def label(attribute: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_]", "_", attribute)


def registry_labels() -> dict[str, set[str]]:
    """Each metric's Prometheus name (and its histogram series') -> the labels it may carry."""
    resource = {label(a["name"]) for r in REGISTRY["resources"] for a in r["attributes"]}
    out = {}
    for m in REGISTRY["metrics"]:
        labels = {label(a) for a in m.get("attributes", []) + m.get("optional_attributes", [])}
        if m["emitter"] == "job":  # relayed with the job's resource attributes (src/telemetry/relay.h)
            labels |= resource
        name = prometheus_name(m)
        if m["kind"] == "histogram":
            for suffix in HISTOGRAM_SERIES:
                out[name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
        else:
            out[name] = labels
    return out


def test_the_committed_dashboard_is_what_the_generator_writes():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gen_grafana.py"), "--check"],
                            capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_the_dashboard_imports_with_a_prometheus_datasource_input():
    (source,) = DASHBOARD["__inputs"]
    assert (source["name"], source["type"], source["pluginId"]) == ("DS_PROMETHEUS", "datasource", "prometheus")
    panels = DASHBOARD["panels"]
    ids = [p["id"] for p in panels]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    graphs = [p for p in panels if p["type"] == "timeseries"]
    assert len(graphs) >= 30, len(graphs)
    for p in graphs:
        assert p["datasource"] == {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}, p["title"]
        refs = [t["refId"] for t in p["targets"]]
        assert refs and len(refs) == len(set(refs)), p["title"]
        assert all(t["expr"] and t["datasource"] == p["datasource"] for t in p["targets"]), p["title"]
    # No two panels share a cell of the 24-column grid.
    cells = {}
    for p in panels:
        g = p["gridPos"]
        assert 0 <= g["x"] and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']!r} overlaps {cells[(x, y)]!r}"
                cells[(x, y)] = p["title"]
    variables = {v["name"]: v for v in DASHBOARD["templating"]["list"]}
    assert set(variables) == {"workload", "run", "attempt"}  # the attempt: the specification's Grafana variable
    assert all(v["datasource"]["uid"] == "${DS_PROMETHEUS}" for v in variables.values())


def test_every_metric_and_label_a_query_names_is_one_the_registry_generates():
    known = registry_labels()
    queries = [(p["title"], t["expr"]) for p in DASHBOARD["panels"] for t in p.get("targets", [])]
    queries += [(v["name"], v["definition"]) for v in DASHBOARD["templating"]["list"]]
    used = set()
    for title, expr in queries:
        names, labels = gen_grafana.names_and_labels(expr.replace("label_values(", "("))
        if expr.startswith("label_values("):  # label_values(SELECTOR, LABEL): LABEL is a label
            labels.add(expr.rstrip(")").rsplit(",", 1)[1].strip())
            names.discard(expr.rstrip(")").rsplit(",", 1)[1].strip())
        assert names, f"{title}: no metric in {expr!r}"
        unknown = names - known.keys()
        assert not unknown, f"{title}: {sorted(unknown)} are not metrics the registry generates ({expr!r})"
        allowed = set().union(*(known[n] for n in names))
        stray = labels - allowed
        assert not stray, f"{title}: labels {sorted(stray)} are on none of {sorted(names)} ({expr!r})"
        used |= names
    # Each area of the reference but pipelines (a feature not built yet) has a panel.
    areas = {m["area"] for m in REGISTRY["metrics"]
             if any(n == prometheus_name(m) or n.removesuffix(s) == prometheus_name(m)
                    for n in used for s in HISTOGRAM_SERIES)}
    assert areas == set(REGISTRY["areas"]) - {"Training pipelines"}, areas


def test_the_checks_refuse_a_renamed_metric_and_a_stray_label():
    """The name check can fail: a query on a metric that is not in the registry, or a label the
    metric does not carry, is seen."""
    known = registry_labels()
    names, labels = gen_grafana.names_and_labels('sum by (akka_optimize_training_rl_term) (akka_optimize_training_sft_losss)')
    assert names - known.keys() == {"akka_optimize_training_sft_losss"}
    names, labels = gen_grafana.names_and_labels('akka_optimize_training_pool_claims{akka_optimize_training_run_phase="X"}')
    assert labels - known["akka_optimize_training_pool_claims"] == {"akka_optimize_training_run_phase"}


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("the prometheus server is not installed: run tools/setup (Debian package prometheus)")
    tmp = tmp_path_factory.mktemp("prometheus")
    (tmp / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    port = free_port()
    server = subprocess.Popen([binary, f"--config.file={tmp / 'prometheus.yml'}", f"--storage.tsdb.path={tmp / 'data'}",
                               f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        try:
            if urllib.request.urlopen(f"{url}/-/ready", timeout=2).status == 200:
                break
        except OSError:
            pass
        assert server.poll() is None and time.monotonic() < deadline, "prometheus did not become ready"
        time.sleep(0.2)
    yield url
    server.terminate()
    server.wait(timeout=30)


def evaluate(url: str, promql: str) -> dict:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/query?" + urllib.parse.urlencode({"query": promql}),
                                    timeout=10) as response:
            return json.load(response)
    except urllib.error.HTTPError as error:
        return json.load(error)


def test_prometheus_evaluates_every_query(prometheus):
    queries = gen_grafana.evaluable_queries()
    assert len(queries) >= 40
    for title, promql in queries:
        assert "$" not in promql, f"{title}: a Grafana variable is left in {promql!r}"
        body = evaluate(prometheus, promql)
        assert body["status"] == "success", f"{title}: {promql!r}: {body}"
    broken = evaluate(prometheus, "sum by (a (akka_optimize_training_sft_loss)")  # the check can fail
    assert broken["status"] == "error" and broken["errorType"] == "bad_data", broken
