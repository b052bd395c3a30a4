"""Issue 15's audit: every metric a short real SFT run emits, checked against an independent figure.

A real trainerd (real trainer-job, the tiny model) is scraped every second by a real Prometheus;
the job's OTLP pushes are captured on their way to trainerd (a receiver that keeps each push and
forwards it). The run is started and followed with the real `trainer` CLI. Then every metric
seen anywhere (the job's pushes, trainerd's /metrics during and after the run, Prometheus) is
compared with what it should say:
  - `trainer capacity` for the pool, claim and quota gauges, `trainer runs list` for runs by phase;
  - the run's phase timestamps (`trainer runs get`) for phase entries and durations and the run's
    duration, and its TRAINING wall time for the job's step phases;
  - `trainer runs metrics` and the job's own event log for per-step figures;
  - the dataset (`trainer datasets get`, and its rows tokenized here with the model's own
    tokenizer and chat template) for the row counts;
  - the model file (its safetensors header) and the plan's LoRA targets for the memory parts;
  - the registry (telemetry/registry.yaml) for each metric's kind, unit, value type, attributes.
A metric emitted that the audit does not cover fails the test, so a new metric cannot slip in
unaudited. The audit table is written to $TRAINER_AUDIT_TABLE when set (docs/telemetry-audit.md
holds the last one) and printed.
"""
from __future__ import annotations

import collections
import json
import math
import os
import pathlib
import socket
import struct
import sys
import time

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE.parent / "cli"))

from audit_support import (BY_PROM, METRICS, PREFIX, Audit, OtlpCapture, Prometheus, close, family_of,  # noqa: E402
                           get_text, otlp_kind, otlp_points, parse_exposition, point_attrs, point_value, select,
                           short, wait_for)
from cli_support import EXAMPLES, Cli, free_port, start_trainerd, stop  # noqa: E402
import gen_grafana  # noqa: E402  (tools/, on the path audit_support gives)

MODEL = "tiny-qwen3"
DATASET = "sentiment-train"
WORKLOAD = "audit"
MAX_STEPS, BATCH, MAX_SEQ, LR, RANK, SPLIT, EVAL_EVERY = 6, 4, 46, 0.003, 8, 0.1, 3
PLAN = f"""kind: run
workload: {WORKLOAD}
baseModel: {MODEL}
config:
  dataset: {DATASET}
  hyperparams:
    optimizer: {{learningRate: {LR}}}
    training: {{maxSteps: {MAX_STEPS}, batchSize: {BATCH}, validationSplit: {SPLIT}, validationFrequencySteps: {EVAL_EVERY}}}
    lora: {{rank: {RANK}}}
  maxSeqLength: {MAX_SEQ}
  model: {{precision: FP32}}
execution: {{gpus: 0}}
"""
PHASE_TOLERANCE = 0.0025  # phase timestamps are stored to the millisecond


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    from models import make_tiny_model
    return pathlib.Path(make_tiny_model(tmp_path_factory.mktemp("models") / MODEL, arch="qwen3", tokenizer="qwen3",
                                        seed=0))

# Families beyond the specification's registry, each declared and documented in our code: the
# endpoints' own (src/service/endpoint_meters.h, docs/serving.md "Endpoint metrics") and the audit
# log's (src/service/audit.h, docs/security.md "Audit log").
EXTENSION_FAMILIES = {
    "trainer_endpoint_requests_total", "trainer_endpoint_prompt_tokens_total",
    "trainer_endpoint_completion_tokens_total", "trainer_endpoint_time_to_first_token_seconds",
    "trainer_endpoint_inter_token_latency_seconds", "trainer_endpoint_kv_blocks",
    "trainer_audit_write_failures_total",
}


def phases(runs: dict) -> list:
    return [(r["runId"], r["phase"]) for r in runs["runs"]]


def rfc(t: str) -> float:
    from datetime import datetime
    return datetime.fromisoformat(t.replace("Z", "+00:00")).timestamp()


def safetensors_parameters(model: pathlib.Path) -> dict:
    """{tensor name: shape} from the model file's own header."""
    with open(model / "model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
    return {k: v["shape"] for k, v in header.items() if k != "__metadata__"}


def lora_parameters(shapes: dict, targets: list[str], rank: int) -> int:
    """LoRA A (rank x in) and B (out x rank) of every targeted linear layer."""
    total = 0
    for name, shape in shapes.items():
        module = name.rsplit(".", 2)[-2] if name.endswith(".weight") else ""
        if module in targets and len(shape) == 2:
            out_features, in_features = shape
            total += rank * (in_features + out_features)
    return total


def token_lengths(model: pathlib.Path, rows: list[dict]) -> list[tuple[int, int]]:
    """(tokens of the whole conversation, tokens before the last assistant turn) of each row, with
    the model's own tokenizer and chat template (Hugging Face transformers, not our text library)."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(model))
    out = []
    for r in rows:
        whole = tok(tok.apply_chat_template(r["messages"], tokenize=False), add_special_tokens=False)["input_ids"]
        prompt = tok(tok.apply_chat_template(r["messages"][:-1], tokenize=False, add_generation_prompt=True),
                     add_special_tokens=False)["input_ids"]
        out.append((len(whole), len(prompt)))
    return out


@pytest.mark.timeout(1200)  # its run is waited for up to 600 + 900 s
def test_every_metric_of_a_short_sft_run_agrees_with_an_independent_figure(bin_dir, tiny_model, tmp_path):
    audit = Audit()
    capture = OtlpCapture()
    d = start_trainerd(bin_dir, tmp_path / "trainerd", {
        "baseModels": [{"name": MODEL, "path": str(tiny_model)}],
        "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
        "telemetry": {"otlpEndpoint": capture.url, "otlpIntervalMs": 1000, "jobSeriesRetentionSeconds": 3600}})
    capture.forward_to = d.url
    capture.data_dir = d.data_dir
    prom = None
    try:
        prom = Prometheus(tmp_path, d.url, free_port())
        cli = Cli(bin_dir / "trainer", d.url)
        cli("base-models", "select", MODEL, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET, check=True)
        cli("workloads", "create", WORKLOAD, check=True)
        plan = tmp_path / "plan.yaml"
        plan.write_text(PLAN)
        run_id = cli.json("runs", "start", "-f", plan, "--force")["runId"]

        # During training: capacity and /metrics read back to back while nothing moves.
        wait_for("the run's first step", lambda: cli.json("runs", "get", run_id)["progress"].get("step", 0) >= 1,
                 timeout=600, interval=0.5)
        during = None
        for _ in range(20):
            cap, runs = cli.json("capacity"), cli.json("runs", "list")
            text = get_text(d.url + "/metrics")
            if cap == cli.json("capacity") and phases(cli.json("runs", "list")) == phases(runs) \
                    and phases(runs) == [(run_id, "TRAINING")]:
                during = (cap, runs, text)
                break
        assert during, "no quiet moment to read capacity and /metrics together during TRAINING"

        waited = cli("runs", "wait", run_id, timeout=900)
        assert waited.returncode == 0, waited.stdout + waited.stderr
        run = cli.json("runs", "get", run_id)
        assert run["phase"] == "COMPLETED", json.dumps(run, indent=1)[:3000]
        steps = cli.json("runs", "metrics", run_id)["steps"]
        after_cap, after_runs = cli.json("capacity"), cli.json("runs", "list")
        dataset = cli.json("datasets", "get", DATASET)
        snapshots = cli.json("runs", "snapshots", run_id)["snapshots"]
        model = cli.json("base-models", "get", MODEL)
        after_text = get_text(d.url + "/metrics")
        events = [json.loads(line) for line in
                  (d.data_dir / "runs" / run_id / f"attempt-{run['attempt']}" / "events.jsonl").read_text().splitlines()]
        # Prometheus has scraped the end.
        wait_for("Prometheus to scrape the run's end",
                 lambda: prom.query('akka_optimize_training_run_phase_entries_total{'
                                    'akka_optimize_training_run_phase="COMPLETED"} == 1'), timeout=60)

        run_audit(audit, d, prom, capture, run_id, run, steps, during, (after_cap, after_runs, after_text), dataset,
                  model, events, tiny_model, snapshots)
        check_the_grafana_dashboard_draws_the_run(prom)
    finally:
        table = audit.markdown()
        print("\n" + table)
        if os.environ.get("TRAINER_AUDIT_TABLE"):
            pathlib.Path(os.environ["TRAINER_AUDIT_TABLE"]).write_text(table)
        if prom:
            prom.stop()
        capture.stop()
        stop(d.proc, d.data_dir)
    bad = audit.failures()
    assert not bad, "metrics that contradict what happened:\n" + "\n".join(
        f"  {r.metric} {r.attributes}: observed {r.observed}, expected {r.expected} ({r.compared_with})" for r in bad)


def check_the_grafana_dashboard_draws_the_run(prom: Prometheus):
    """docs/grafana/trainer.json on this run's series: every query whose metrics Prometheus holds
    returns series, and the panels an SFT run must fill are among them. (This run holds no GPU:
    the GPU time and device panels stay empty, as they should.)"""
    def evaluate():
        present = set(prom.names())
        drawn, empty = set(), []
        for title, promql in gen_grafana.evaluable_queries():
            names, _ = gen_grafana.names_and_labels(promql)
            if not names or not all(n in present for n in names):
                continue
            if prom.query(promql):
                drawn.add(title)
            else:
                empty.append(f"{title}: {promql}")
        return drawn, empty

    # A rate() needs two scrapes of a series: one that first appeared at the run's end (its
    # duration) is drawn from the next scrape on (1 s apart), so the queries are given a while.
    deadline = time.monotonic() + 30
    drawn, empty = evaluate()
    while empty and time.monotonic() < deadline:
        time.sleep(1)
        drawn, empty = evaluate()
    assert not empty, "dashboard queries that return nothing although Prometheus holds their metrics:\n" + \
        "\n".join(empty)
    must = {"Loss", "Learning rate", "Gradient norm", "Tokens per second", "Steps per second", "Step phases",
            "Runs by phase", "Claims by state (queued claims wait for devices)", "Bytes moved", "Phase entries",
            "Devices declared and claimed, by pool", "variable run", "variable workload", "variable attempt"}
    assert must <= drawn, f"panels an SFT run must fill, left empty: {sorted(must - drawn)}"


def run_audit(audit: Audit, d, prom: Prometheus, capture: OtlpCapture, run_id, run, steps, during, after, dataset,
              model, events, model_dir, snapshots):
    instance = socket.gethostname()
    plan = run["plan"]
    hp = plan["config"]["hyperparams"]
    emitted: dict[str, str] = {}  # registry name -> where it was seen first

    # ---- what was emitted, everywhere --------------------------------------------------------------
    pushes = capture.pushes
    assert pushes, "the job pushed no OTLP"
    for _, push in pushes:
        for name in capture.metrics_of_push(push):
            emitted.setdefault(name, "the job's OTLP")
    unknown = []
    for text in (during[2], after[2]):
        types, _ = parse_exposition(text)
        for family in types:
            if family == "target_info" or family in EXTENSION_FAMILIES:
                continue
            if family not in BY_PROM:
                unknown.append(family)
            else:
                emitted.setdefault(BY_PROM[family], "trainerd /metrics")
    for name in prom.names():
        if not name.startswith("akka_optimize_training_"):
            continue
        base = name
        for suffix in ("_bucket", "_sum", "_count"):
            if name.endswith(suffix) and name[: -len(suffix)] in BY_PROM:
                base = name[: -len(suffix)]
        if base not in BY_PROM:
            unknown.append(name)
        else:
            emitted.setdefault(BY_PROM[base], "Prometheus")
    assert not unknown, f"families on /metrics that the registry does not declare: {sorted(set(unknown))}"

    # ---- service: its families on /metrics against the registry -------------------------------------
    types, samples = parse_exposition(after[2])
    for family, kind in sorted(types.items()):
        name = BY_PROM.get(family)
        if name is None or METRICS[name]["emitter"] != "service":
            continue
        declared = METRICS[name]
        problems = [] if kind == declared["kind"] else [f"TYPE {kind}"]
        required = {short(a).replace(".", "_") for a in declared.get("attributes", [])}
        allowed = required | {short(a).replace(".", "_") for a in declared.get("optional_attributes", [])}
        for sample in samples:
            if family_of(sample.name, types) != family:
                continue
            keys = set(sample.labels) - {"le"}
            if not required <= keys <= allowed:
                problems.append(f"labels {sorted(keys)}")
            if sample.name.endswith("_bucket") and sample.labels["le"] != "+Inf" and \
                    float(sample.labels["le"]) not in [float(b) for b in declared["buckets"]]:
                problems.append(f"bound {sample.labels['le']}")
        audit.check(name, "(declaration)", "; ".join(sorted(set(problems))) or "as registered", "as registered",
                    "telemetry/registry.yaml: TYPE, label keys, bounds (trainerd /metrics)", covers=False)

    # ---- service: pools, claims, quotas, runs by phase against the CLI ----------------------------
    for when, (cap, runs, text) in (("during TRAINING", during), ("after the run", after)):
        _, samples = parse_exposition(text)

        def value(metric, **labels):
            found = select(samples, prom_name(metric), **labels)
            return sum(s.value for s in found) if found else None

        for pool in cap["pools"]:
            base = dict(instance=instance, pool_accelerator=pool["accelerator"],
                        pool_serving=str(pool["serving"]).lower())
            attrs = f"{pool['accelerator']}, {when}"
            for state, cap_state in (("GRANTED", "GRANTED"), ("QUEUED", "QUEUED")):
                claims = sum(1 for c in cap["claims"] if c["pool"] == pool["name"] and c["state"] == cap_state)
                audit.check(PREFIX + "pool.claims", f"{state}, {attrs}", value(PREFIX + "pool.claims", claim_state=state,
                                                                                  **base),
                            claims, "`trainer capacity`: claims of the pool in that state")
            audit.check(PREFIX + "pool.devices.claimed", f"GRANTED, {attrs}",
                        value(PREFIX + "pool.devices.claimed", claim_state="GRANTED", **base), pool["granted"],
                        "`trainer capacity`: pool GRANTED")
            audit.check(PREFIX + "pool.devices.claimed", f"QUEUED, {attrs}",
                        value(PREFIX + "pool.devices.claimed", claim_state="QUEUED", **base), pool["queued"],
                        "`trainer capacity`: pool QUEUED")
            audit.check(PREFIX + "pool.devices.declared", attrs, value(PREFIX + "pool.devices.declared", **base),
                        pool["declared"], "`trainer capacity`: pool DECLARED")
            audit.check(PREFIX + "pool.devices.observed", attrs, value(PREFIX + "pool.devices.observed", **base),
                        pool.get("observed"), "`trainer capacity`: pool observed")
        for quota in cap["quotas"]:
            base = dict(instance=instance, workload=quota["workload"])
            attrs = f"{quota['workload']}, {when}"
            audit.check(PREFIX + "workload.devices.claimed", f"GRANTED, {attrs}",
                        value(PREFIX + "workload.devices.claimed", claim_state="GRANTED", **base), quota["held"],
                        "`trainer capacity`: quota HELD")
            audit.check(PREFIX + "workload.devices.claimed", f"QUEUED, {attrs}",
                        value(PREFIX + "workload.devices.claimed", claim_state="QUEUED", **base), quota["queued"],
                        "`trainer capacity`: quota QUEUED")
            audit.check(PREFIX + "workload.devices.quota", attrs, value(PREFIX + "workload.devices.quota", **base),
                        quota["quota"], "`trainer capacity`: quota")
        by_phase = collections.Counter(r["phase"] for r in runs["runs"])
        active = {s.labels["run_phase"]: s.value for s in select(samples, prom_name(PREFIX + "run.active"),
                                                                 instance=instance)}
        open_phases = {p: n for p, n in by_phase.items() if p not in ("COMPLETED", "FAILED", "CANCELLED")}
        audit.check(PREFIX + "run.active", f"every phase, {when}",
                    {p: int(n) for p, n in active.items() if n}, open_phases,
                    "`trainer runs list`: runs by phase, open phases")
        assert active, f"run.active missing {when}"
        audit.check(PREFIX + "pipeline.active", when, value(PREFIX + "pipeline.active", instance=instance), 0,
                    "`trainer pipelines list --phase open`: this audit starts no pipeline")

    # ---- service: the run's lifecycle against its phase timestamps ---------------------------------
    _, samples = parse_exposition(after[2])
    history = run["phaseHistory"]
    entries = collections.Counter(h["phase"] for h in history)
    observed_entries = {s.labels["run_phase"]: int(s.value) for s in select(samples, prom_name(PREFIX + "run.phase.entries"))}
    audit.check(PREFIX + "run.phase.entries", "every phase", observed_entries, dict(entries),
                "`trainer runs get`: phaseHistory, entries per phase")
    name = prom_name(PREFIX + "run.phase.duration")
    bounds = [float(b) for b in METRICS[PREFIX + "run.phase.duration"]["buckets"]]
    for left, entered in zip(history, history[1:]):
        phase = left["phase"]
        expected = rfc(entered["enteredAt"]) - rfc(left["enteredAt"])
        got_sum = select(samples, name + "_sum", run_phase=phase)
        got_count = select(samples, name + "_count", run_phase=phase)
        observed = got_sum[0].value if got_sum else None
        audit.check(PREFIX + "run.phase.duration", f"{phase}: sum (count {got_count[0].value if got_count else 0:g})",
                    observed, round(expected, 3), "`trainer runs get`: next phase's enteredAt − this one's (±2.5 ms)",
                    observed is not None and got_count[0].value == 1 and abs(observed - expected) <= PHASE_TOLERANCE)
        buckets = {s.labels["le"]: s.value for s in select(samples, name + "_bucket", run_phase=phase)}
        want = {fmt_le(b): (1.0 if observed is not None and observed <= b else 0.0) for b in bounds} | {"+Inf": 1.0}
        audit.check(PREFIX + "run.phase.duration", f"{phase}: buckets", "as observed" if buckets == want else buckets,
                    "as observed", f"the registry's {len(bounds)} bounds, the one observation placed")
    created, ended = rfc(run["createdAt"]), rfc(run["endedAt"])
    name = prom_name(PREFIX + "run.duration")
    got = select(samples, name + "_sum", run_outcome="COMPLETED", run_method="SFT")
    count = select(samples, name + "_count", run_outcome="COMPLETED", run_method="SFT")
    audit.check(PREFIX + "run.duration", "COMPLETED, SFT: sum", got[0].value if got else None, round(ended - created, 3),
                "`trainer runs get`: endedAt − createdAt (±2.5 ms)",
                bool(got) and count[0].value == 1 and abs(got[0].value - (ended - created)) <= PHASE_TOLERANCE)
    failures = select(samples, prom_name(PREFIX + "run.failures"))
    audit.check(PREFIX + "run.failures", "every phase", sum(s.value for s in failures) if failures else None, None,
                "the run COMPLETED: no failure counted", not any(s.value for s in failures))
    gpu = select(samples, prom_name(PREFIX + "cost.gpu.time"))
    audit.check(PREFIX + "cost.gpu.time", "cpu pool", sum(s.value for s in gpu) if gpu else None, None,
                f"a CPU pool is not GPU time (`runs get` cost: {run['cost']['gpuSeconds']:.1f} CPU-s)", not gpu)
    audit.check(PREFIX + "cost.gpu.time", "cpu pool, in Prometheus", bool(prom.query(prom_name(PREFIX + "cost.gpu.time"))),
                False, "never published during the run")

    # ---- job: its export against the registry -------------------------------------------------------
    last = capture.metrics_of_push(pushes[-1][1])
    seen_in_pushes: dict[str, dict] = {}
    for _, push in pushes:
        seen_in_pushes.update(capture.metrics_of_push(push))
    for name, metric in sorted(seen_in_pushes.items()):
        declared = METRICS.get(name)
        if declared is None:
            audit.rows.append(audit_row_unknown(name))
            continue
        kind = otlp_kind(metric)
        problems = []
        declared_kind = declared["kind"]
        if declared_kind == "histogram" and declared.get("histogram") == "exponential":
            declared_kind = "histogram(exponential)"
        if kind != declared_kind:
            problems.append(f"kind {kind}")
        if metric.get("unit") != declared["unit"]:
            problems.append(f"unit {metric.get('unit')!r}")
        required = {short(a) for a in declared.get("attributes", [])}
        allowed = required | {short(a) for a in declared.get("optional_attributes", [])}
        for p in otlp_points(metric):
            keys = set(point_attrs(p))
            if not required <= keys <= allowed:
                problems.append(f"attributes {sorted(keys)}")
            if kind == "histogram(exponential)":
                pass  # no bounds to compare; OTLP carries an exponential histogram's sum as a double
            elif kind != "histogram":
                int_typed = "asInt" in p
                if int_typed != (declared["value_type"] == "int"):
                    problems.append("value type " + ("int" if int_typed else "double"))
            elif [float(b) for b in p["explicitBounds"]] != [float(b) for b in declared["buckets"]]:
                problems.append("bounds")
        audit.check(name, "(declaration)", "; ".join(sorted(set(problems))) or "as registered", "as registered",
                    "telemetry/registry.yaml: kind, unit, value type, attribute keys, bounds", covers=False)

    # ---- job: the resource names the run -------------------------------------------------------------
    resource = capture.resource_of(pushes[-1][1])
    expected_resource = {
        "run.id": run_id, "run.attempt": run["attempt"], "workload": run["workload"]["name"], "run.method": "SFT",
        "run.engine": "native", "run.base_model": plan["baseModel"], "run.base_model_sha": model["contentHash"],
        "run.settings_sha": run["settingsSha"], "run.lora_rank": hp["lora"]["rank"],
        "run.learning_rate": hp["optimizer"]["learningRate"],
        "job.submission_id": f"{run_id}-{run['attempt']}", "profile": after[0]["pools"][0]["accelerator"]}
    observed_resource = {short(k): v for k, v in resource.items() if k.startswith(PREFIX)}
    resource_row(audit, observed_resource, expected_resource)
    # ... and every job series on trainerd's /metrics carries it as labels.
    _, samples = parse_exposition(after[2])
    job_samples = [s for s in samples if s.labels.get("run_id") == run_id]
    labels_ok = all(s.labels.get(k.replace(".", "_")) == str(v) if not isinstance(v, float) else
                    close(float(s.labels.get(k.replace(".", "_"), "nan")), v)
                    for s in job_samples for k, v in expected_resource.items())
    audit.rows[-1].compared_with += "; the same labels on every job series of /metrics: " + (
        "yes" if labels_ok and job_samples else "NO")
    audit.rows[-1].ok = audit.rows[-1].ok and labels_ok and bool(job_samples)

    # ---- job: values against the CLI, the event log, the dataset, the model --------------------------
    def pushed(name, **attrs):
        metric = last.get(PREFIX + name)
        if metric is None:
            return None
        for p in otlp_points(metric):
            if point_attrs(p) == {k.replace("__", "."): v for k, v in attrs.items()}:
                return p
        return None

    def pv(name, **attrs):
        p = pushed(name, **attrs)
        return None if p is None else point_value(p)

    final = steps[-1]
    n = len(steps)
    audit.check(PREFIX + "sft.step.count", "", pv("sft.step.count"), MAX_STEPS,
                f"`trainer runs metrics`: {n} steps; plan maxSteps {MAX_STEPS}; `runs get` progress "
                f"{run['progress']['step']}", pv("sft.step.count") == MAX_STEPS == n == run["progress"]["step"])
    hist = pushed("sft.step.duration")
    secs = [s["stepSeconds"] for s in steps]
    bounds = [float(b) for b in METRICS[PREFIX + "sft.step.duration"]["buckets"]]
    want_buckets = [sum(1 for s in secs if (i == 0 or s > bounds[i - 1]) and (i == len(bounds) or s <= bounds[i]))
                    for i in range(len(bounds) + 1)]
    audit.check(PREFIX + "sft.step.duration", "count, sum", (int(hist["count"]), hist["sum"]) if hist else None,
                (n, sum(secs)), "`trainer runs metrics`: steps and Σ stepSeconds",
                bool(hist) and int(hist["count"]) == n and close(hist["sum"], sum(secs)))
    audit.check(PREFIX + "sft.step.duration", "buckets", [int(c) for c in hist["bucketCounts"]] if hist else None,
                want_buckets, "`trainer runs metrics`: stepSeconds placed in the registry's bounds")
    for metric, key in (("sft.loss", "loss"), ("sft.grad_norm", "gradNorm"), ("sft.token_accuracy", "tokenAccuracy"),
                        ("sft.throughput", "tokensPerSecond"), ("sft.padding.ratio", "paddingShare")):
        audit.check(PREFIX + metric, "", pv(metric), float(final[key]), f"`trainer runs metrics`: step {n} {key}",
                    close(pv(metric), final[key], rel=1e-12))
    audit.check(PREFIX + "sft.loss", "vs `runs get`", pv("sft.loss"), float(run["latest"]["loss"]),
                "`trainer runs get`: latest loss", close(pv("sft.loss"), run["latest"]["loss"], rel=1e-12))
    schedule = LR * (MAX_STEPS - n + 1) / MAX_STEPS
    audit.check(PREFIX + "sft.learning_rate", "", pv("sft.learning_rate"), schedule,
                f"plan: lr {LR}, linear decay, no warmup, at step {n} (and `runs metrics` {final['learningRate']:g})",
                close(pv("sft.learning_rate"), schedule, rel=1e-9) and close(final["learningRate"], schedule, rel=1e-9))
    devices = pv("job.devices")
    audit.check(PREFIX + "sft.throughput", "= batch tokens / step seconds / devices", pv("sft.throughput"),
                final["batchTokens"] / final["stepSeconds"] / max(1, devices or 0),
                "`trainer runs metrics`: step batchTokens and stepSeconds (to 1e-6: stored to the nanosecond)",
                close(pv("sft.throughput"), final["batchTokens"] / final["stepSeconds"] / max(1, devices or 0), rel=1e-6))
    audit.check(PREFIX + "sft.batch.tokens", "", pv("sft.batch.tokens"), final["batchTokens"],
                f"`trainer runs metrics`: step {n} batchTokens (≤ batch {BATCH} × maxSeqLength {MAX_SEQ})",
                pv("sft.batch.tokens") == final["batchTokens"] <= BATCH * MAX_SEQ)
    ratio = pv("sft.padding.ratio")
    positions = final["batchTokens"] / (1 - ratio) if ratio is not None and ratio < 1 else None
    whole = positions is not None and abs(positions - round(positions)) < 1e-6 and round(positions) % BATCH == 0 \
        and round(positions) // BATCH <= MAX_SEQ
    audit.check(PREFIX + "sft.padding.ratio", "= padding / positions", "consistent" if whole else positions,
                "consistent", f"batch tokens / (1 − ratio) is {BATCH} rows × a length ≤ maxSeqLength "
                f"({positions and round(positions)} positions)")
    for phase, key in (("input", "inputSeconds"), ("forward_backward", "forwardBackwardSeconds"),
                       ("optimizer", "optimizerSeconds"), ("step", "stepSeconds")):
        audit.check(PREFIX + "sft.step.phase.duration", phase, pv("sft.step.phase.duration", sft__step__phase=phase),
                    float(final[key]), f"`trainer runs metrics`: step {n} {key}",
                    close(pv("sft.step.phase.duration", sft__step__phase=phase), final[key], rel=1e-12))
    validations = [e for e in events if e.get("type") == "validation"]
    completed = [e for e in events if e.get("type") == "completed"]
    audit.check(PREFIX + "sft.step.phase.duration", "evaluation",
                pv("sft.step.phase.duration", sft__step__phase="evaluation"),
                float(validations[-1]["evaluationSeconds"]) if validations else None,
                "the job's event log: last validation's evaluationSeconds")
    audit.check(PREFIX + "sft.step.phase.duration", "export", pv("sft.step.phase.duration", sft__step__phase="export"),
                float(completed[-1]["exportSeconds"]) if completed else None,
                "the job's event log: completed's exportSeconds")
    audit.check(PREFIX + "sft.step.phase.duration", "checkpoint",
                pv("sft.step.phase.duration", sft__step__phase="checkpoint"), None,
                "no intermediate checkpoint (plan saveEvery unset)")
    phases_at = {h["phase"]: rfc(h["enteredAt"]) for h in history}
    training_wall = phases_at["FINALIZING"] - phases_at["TRAINING"]
    spent = sum(secs) + sum(v["evaluationSeconds"] for v in validations) + sum(c["exportSeconds"] for c in completed)
    audit.check(PREFIX + "sft.step.phase.duration", "Σ steps + evaluations + export ≤ TRAINING wall time",
                round(spent, 3), f"≤ {training_wall:.3f}", "`trainer runs get`: TRAINING → FINALIZING (+0.5 s for "
                "the service's 100 ms event polling)", spent <= training_wall + 0.5)
    val_steps = [s for s in steps if s.get("validationLoss") is not None]
    audit.check(PREFIX + "sft.validation.loss", "", pv("sft.validation.loss"),
                float(val_steps[-1]["validationLoss"]) if val_steps else None,
                f"`trainer runs metrics`: validationLoss at step {val_steps[-1]['step'] if val_steps else '-'} "
                f"(every {EVAL_EVERY} steps), = the event log's and `runs get`'s",
                bool(val_steps) and close(pv("sft.validation.loss"), val_steps[-1]["validationLoss"], rel=1e-12)
                and close(run["latest"]["validationLoss"], val_steps[-1]["validationLoss"], rel=1e-12)
                and [s["step"] for s in val_steps] == list(range(EVAL_EVERY, MAX_STEPS + 1, EVAL_EVERY)))

    # Memory: the parts against the model file and the plan's LoRA targets.
    shapes = safetensors_parameters(model_dir)
    parameters = sum(math.prod(s) for s in shapes.values())
    lora = lora_parameters(shapes, hp["lora"]["targetModules"], hp["lora"]["rank"])
    fp32 = 4
    parts = {"weights": (parameters * fp32, f"model.safetensors: {parameters:,} parameters × 4 bytes (FP32)"),
             "adapter": (lora * fp32, f"rank {RANK} A and B of {len(hp['lora']['targetModules'])} targeted layer kinds "
                                      f"from the model's shapes: {lora:,} parameters × 4 bytes"),
             "gradients": (lora * fp32, "one FP32 gradient per adapter parameter"),
             "optimizer_state": (2 * lora * fp32, "AdamW's two FP32 moments per adapter parameter")}
    for part, (want, why) in parts.items():
        audit.check(PREFIX + "memory.usage", part, pv("memory.usage", memory__component=part), want, why)
    usage = run["memory"]["usage"]
    for part, key in (("activations", "activations"), ("other_tensors", "otherTensors")):
        audit.check(PREFIX + "memory.usage", part, pv("memory.usage", memory__component=part), usage.get(key),
                    f"`trainer runs get`: Memory {key} (step {run['memory']['step']})")
    for part in ("allocator_cache", "outside_allocator", "free"):
        audit.check(PREFIX + "memory.usage", part, pv("memory.usage", memory__component=part), None,
                    "CUDA-only part: absent on the CPU")
    peak = pv("sft.memory.allocated.peak")
    step_sums = [sum(v for v in s["memory"]["usage"].values()) for s in steps if s.get("memory")]
    audit.check(PREFIX + "sft.memory.allocated.peak", "", peak, run["memory"]["allocatedPeakBytes"],
                "`trainer runs get`: Memory allocated peak; ≥ every step's parts added up "
                f"(largest {max(step_sums):,})",
                peak == run["memory"]["allocatedPeakBytes"] and peak >= max(step_sums))
    audit.check(PREFIX + "sft.memory.allocated.peak", "first step = its parts added up",
                steps[0]["memory"]["allocatedPeakBytes"], step_sums[0],
                "`trainer runs metrics`: step 1 memory usage parts")
    audit.check(PREFIX + "sft.memory.reserved.peak", "", pv("sft.memory.reserved.peak"), None,
                "no caching allocator on the CPU: absent")
    audit.check(PREFIX + "sft.mfu", "", pv("sft.mfu"), None, "no peak FLOP/s for a CPU: absent")

    # Rows: the dataset, tokenized here.
    rows = [json.loads(line) for line in (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()]
    lengths = token_lengths(model_dir, rows)
    held_out = int(dataset["rows"] * SPLIT)
    expected_rows = {"all": dataset["rows"] - held_out, "held_out": held_out,
                     "truncated": sum(1 for w, _ in lengths if w > MAX_SEQ),
                     "at_limit": sum(1 for w, _ in lengths if w == MAX_SEQ),
                     "dropped": sum(1 for _, p in lengths if p >= MAX_SEQ)}
    why = {"all": f"`trainer datasets get`: {dataset['rows']} rows less the {held_out} held out "
                  f"(`runs get`: {run['dataSplit']['trainRows']} trained)",
           "held_out": f"{dataset['rows']} rows × validationSplit {SPLIT} (`runs get`: "
                       f"{run['dataSplit']['validationRows']})",
           "truncated": f"rows over maxSeqLength {MAX_SEQ} tokens (transformers' tokenizer and chat template)",
           "at_limit": f"rows of exactly {MAX_SEQ} tokens (transformers)",
           "dropped": f"rows whose prompt alone fills {MAX_SEQ} tokens (transformers)"}
    for fit, want in expected_rows.items():
        audit.check(PREFIX + "sft.data.rows", fit, pv("sft.data.rows", sft__data__fit=fit), want, why[fit])

    # Devices and workers.
    audit.check(PREFIX + "job.devices", "at the end", devices, 0, "plan execution.gpus 0: no accelerator held")
    held = prom.query(f'max_over_time({prom_name(PREFIX + "job.devices")}'
                      f'{{akka_optimize_training_run_id="{run_id}"}}[30m])')
    audit.check(PREFIX + "job.devices", "most during the run (Prometheus)",
                float(held[0]["value"][1]) if held else None, 0.0, "plan execution.gpus 0", None)
    workers = prom.query(f'max_over_time({prom_name(PREFIX + "job.worker.info")}'
                         f'{{akka_optimize_training_run_id="{run_id}"}}[30m])')
    shown = sorted((w["metric"].get("akka_optimize_training_job_rank"), w["metric"].get("akka_optimize_training_job_role"),
                    w["metric"].get("akka_optimize_training_hw_id"), float(w["value"][1])) for w in workers)
    # The worker's series lives from the job's devices event to its exit, about a second here:
    # what the job emitted is read from its pushes (every one it made); Prometheus, scraping
    # every second, may or may not have caught that second, and must agree when it did.
    from_pushes = set()
    for _, push in capture.pushes:
        metric = capture.metrics_of_push(push).get(PREFIX + "job.worker.info")
        for p in (otlp_points(metric) if metric else []):
            a = point_attrs(p)
            rank = a.get("job.rank")
            from_pushes.add((None if rank is None else str(rank), a.get("job.role"), a.get("hw.id"),
                             float(point_value(p))))
    want_workers = [("0", "trainer", None, 1.0)]
    audit.check(PREFIX + "job.worker.info", "during the run (the job's pushes)", sorted(from_pushes), want_workers,
                "the job's devices event: one CPU device, rank 0, no GPU id")
    audit.check(PREFIX + "job.worker.info", "during the run (Prometheus, when a scrape fell in the worker's life)",
                shown, want_workers, "the same series as the job pushed, or none scraped", shown in ([], want_workers))
    end_workers = [s for s in job_samples if s.name == prom_name(PREFIX + "job.worker.info")]
    audit.check(PREFIX + "job.worker.info", "after the job ended (/metrics)", len(end_workers) or None, None,
                "a worker that exits ends its series (the job's last push has none)",
                not end_workers and pushed("job.worker.info") is None)

    _, samples_after = parse_exposition(after[2])
    # ---- snapshots: the final snapshot's publication against the catalog and the storage folder ----
    # The run has no saveEvery: its one snapshot is the final one, both kinds, published before the
    # job reported completion.
    committed = {(sn["snapshotId"], kind) for sn in snapshots for kind, k in sn.get("kinds", {}).items()
                 if k.get("state", "committed") == "committed"}
    audit.check(PREFIX + "checkpoint.publication.pending", "at the end", pv("checkpoint.publication.pending"), 0,
                f"`trainer runs snapshots`: {len(snapshots)} snapshot(s) committed, nothing left to publish")
    for kind in sorted({k for _, k in committed}):
        on_disk = sum(f.stat().st_size for sn in snapshots if kind in sn.get("kinds", {})
                      for f in (d.data_dir / sn["kinds"][kind]["location"]).rglob("*") if f.is_file())
        p = pushed("checkpoint.transfer.size", checkpoint__operation="upload", checkpoint__outcome="success",
                   checkpoint__artifact__kind=kind, checkpoint__storage__mode="shared_filesystem")
        observed = (int(p["count"]), int(round(float(p["sum"])))) if p else None
        audit.check(PREFIX + "checkpoint.transfer.size", f"upload, success, {kind}", observed,
                    (sum(1 for _, k in committed if k == kind), on_disk),
                    "`trainer runs snapshots` committed kinds; bytes of their files (payload + manifest) in the "
                    "storage folder")
    durations = {}
    for point in otlp_points(last.get(PREFIX + "checkpoint.duration") or {}):
        a = point_attrs(point)
        key = (a.get("checkpoint.operation"), a.get("checkpoint.outcome"))  # summed over artifact kinds
        count, total = durations.get(key, (0, 0.0))
        durations[key] = (count + int(point["count"]), total + float(point["sum"]))
    outcomes = sorted({o for _, o in durations})
    audit.check(PREFIX + "checkpoint.duration", "outcomes", outcomes, ["success"] if durations else [],
                "the run completed and its snapshot is committed: no failed operation")
    per_kind = {"stage": len(snapshots), "reserve": len(snapshots), "publish": len(snapshots),
                "upload": len(committed), "acknowledge": len(committed)}
    counts = {op: durations.get((op, "success"), (0, 0.0))[0] for op in per_kind}
    audit.check(PREFIX + "checkpoint.duration", "count per operation", counts, per_kind,
                "`trainer runs snapshots`: one stage, reservation and publication per snapshot; one upload and "
                "acknowledgement per committed kind")
    publish_seconds = durations.get(("publish", "success"), (0, 0.0))[1]
    phases_end = {h["phase"]: rfc(h["enteredAt"]) for h in history}
    window = phases_end["CLEANING_UP"] - phases_end["TRAINING"]
    audit.check(PREFIX + "checkpoint.duration", "publish: sum ≤ TRAINING + FINALIZING wall time",
                round(publish_seconds, 3), f"≤ {window:.3f}", "`trainer runs get`: TRAINING → CLEANING_UP",
                0 < publish_seconds <= window)
    attempts = [s for s in samples_after if s.name == prom_name(PREFIX + "service.operation.attempts")
                and s.labels.get("service_operation") == "commit_snapshot"]
    by_stage = collections.Counter()
    for s in attempts:
        by_stage[f'{s.labels.get("service_stage")}/{s.labels.get("service_outcome")}'] += s.value
    audit.check(PREFIX + "service.operation.attempts", "commit_snapshot, by stage/outcome", dict(by_stage),
                {stage: float(len(committed)) for stage in by_stage} if by_stage and
                all(k.endswith("/success") for k in by_stage) else "every stage: one success per committed kind",
                "`trainer runs snapshots`: each stage of a catalog commit succeeds once per committed kind")
    dur_count = select(samples_after, prom_name(PREFIX + "service.operation.duration") + "_count",
                       service_operation="commit_snapshot", service_outcome="success")
    dur_sum = select(samples_after, prom_name(PREFIX + "service.operation.duration") + "_sum",
                     service_operation="commit_snapshot", service_outcome="success")
    audit.check(PREFIX + "service.operation.duration", "commit_snapshot, success: count; sum ≤ TRAINING → CLEANING_UP",
                (sum(x.value for x in dur_count), bool(dur_sum) and 0 < sum(x.value for x in dur_sum) <= window),
                (float(len(committed)), True), "`trainer runs snapshots` committed kinds; the run's phase timestamps")

    # Trainerd serves what the job pushed last, and Prometheus scraped the same.
    mismatched = []
    types, _ = parse_exposition(after[2])
    for s in job_samples:
        family = family_of(s.name, types)
        if s.name.endswith("_bucket") or types.get(family) == "histogram" and not s.name.endswith(("_sum", "_count")):
            continue
        got = prom.query(f'last_over_time({s.name}{{akka_optimize_training_run_id="{run_id}"}}[30m])')
        values = [float(g["value"][1]) for g in got
                  if all(g["metric"].get(LABEL(k)) == v for k, v in s.labels.items())]
        if values != [s.value]:
            mismatched.append((s.name, s.labels, s.value, values))
    audit.check(PREFIX + "sft.loss", "(every job series) Prometheus = trainerd /metrics",
                f"{len(job_samples) - len(mismatched)}/{len(job_samples)} agree" if not mismatched else mismatched[:3],
                f"{len(job_samples)}/{len(job_samples)} agree", "Prometheus last_over_time of each series", covers=False)

    # ---- nothing emitted escapes the audit -----------------------------------------------------------
    for name, where in sorted(emitted.items()):
        if name not in audit.audited:
            audit.rows.append(audit_row_unaudited(name, where))


def LABEL(k: str) -> str:
    return k if k in ("le", "__name__") else "akka_optimize_training_" + k


def prom_name(metric: str) -> str:
    from audit_support import prometheus_name
    return prometheus_name(METRICS[metric])


def fmt_le(b: float) -> str:
    return f"{b:g}"


def resource_row(audit: Audit, observed: dict, expected: dict):
    from audit_support import Row
    bad = {k: (observed.get(k), v) for k, v in expected.items()
           if not (close(observed.get(k), v) if isinstance(v, float) else observed.get(k) == v)}
    audit.rows.append(Row("(resource of every job series)", "resource", "", ", ".join(sorted(expected)),
                          "as expected" if not bad else str(bad), "as expected",
                          "`runs get` (id, attempt, workload, settingsSha, plan), `base-models get` contentHash, "
                          "`capacity` pool accelerator; submission id per attempt", not bad))


def audit_row_unknown(name: str):
    from audit_support import Row
    return Row(short(name), "?", "?", "", "emitted", "declared", "telemetry/registry.yaml", False)


def audit_row_unaudited(name: str, where: str):
    from audit_support import Row
    return Row(short(name), METRICS[name]["kind"], METRICS[name]["unit"], "", f"emitted ({where})", "audited",
               "the audit table: a metric the run emits that nothing checks", False)
