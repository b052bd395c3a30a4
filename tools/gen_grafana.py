#!/usr/bin/env python3
"""Writes docs/grafana/trainer.json: an import-ready Grafana dashboard for the Prometheus series
trainerd serves on /metrics (the service's own and, relayed, its jobs'; docs/telemetry-usage.md).

    gen_grafana.py                 write docs/grafana/trainer.json
    gen_grafana.py --check         exit 1 when the committed file differs from what this writes

Every query names metrics by the Prometheus names the registry gives them (gen_telemetry's
prometheus_name(), the same translation trainerd's exposition uses), so a metric renamed in
telemetry/registry.yaml fails tests/python/telemetry/test_grafana_dashboard.py until the
dashboard follows. Grafana-only variables ($run, $workload, $__rate_interval) are the only
parts of a query Prometheus does not read itself; the test substitutes them and asks a real
Prometheus to evaluate every query.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "grafana" / "trainer.json"
P = "akka_optimize_training_"  # the registry's prefix, as Prometheus spells it
DATASOURCE = {"type": "prometheus", "uid": "${DS_PROMETHEUS}"}
RUN = f'{P}run_id=~"$run", {P}run_attempt=~"$attempt"'  # a job's series, for the runs and attempts chosen
WORKLOAD = f'{P}workload=~"$workload"'
RATE = "$__rate_interval"


def m(name: str) -> str:
    return P + name


def job(name: str, extra: str = "") -> str:
    """A job metric of the runs chosen, one series per run (and attempt: a resumed run's attempts
    are separate series)."""
    return f"{m(name)}{{{RUN}{', ' + extra if extra else ''}}}"


def quantile(q: float, histogram: str, by: str = "", selector: str = "") -> str:
    labels = "le" + (", " + by if by else "")
    inner = f"{m(histogram)}_bucket{{{selector}}}" if selector else f"{m(histogram)}_bucket"
    return f"histogram_quantile({q}, sum by ({labels}) (rate({inner}[{RATE}])))"


RUN_LEGEND = "{{" + P + "run_id}} #{{" + P + "run_attempt}}"

# (row title, [(panel title, unit, [(expr, legend)...]), ...]); units are Grafana's unit ids.
ROWS = [
    ("Capacity", [
        ("Devices declared and claimed, by pool", "short", [
            (f"sum by ({P}pool_accelerator, {P}pool_serving) ({m('pool_devices_declared')})",
             "declared {{" + P + "pool_accelerator}} serving={{" + P + "pool_serving}}"),
            (f"sum by ({P}pool_accelerator, {P}pool_serving, {P}claim_state) ({m('pool_devices_claimed')})",
             "{{" + P + "claim_state}} {{" + P + "pool_accelerator}} serving={{" + P + "pool_serving}}"),
        ]),
        ("Claims by state (queued claims wait for devices)", "short", [
            (f"sum by ({P}claim_state) ({m('pool_claims')})", "{{" + P + "claim_state}}"),
        ]),
        ("Workload devices against quota", "short", [
            (f"sum by ({P}workload, {P}claim_state) ({m('workload_devices_claimed')}{{{WORKLOAD}}})",
             "{{" + P + "workload}} {{" + P + "claim_state}}"),
            (f"max by ({P}workload) ({m('workload_devices_quota')}{{{WORKLOAD}}})", "{{" + P + "workload}} quota"),
        ]),
        ("GPU time by workload (last hour)", "s", [
            (f"sum by ({P}workload, {P}pool_accelerator) "
             f"(increase({m('cost_gpu_time_seconds_total')}{{{WORKLOAD}}}[1h]))",
             "{{" + P + "workload}} {{" + P + "pool_accelerator}}"),
        ]),
    ]),
    ("Runs", [
        ("Runs by phase", "short", [
            (f"sum by ({P}run_phase) ({m('run_active')})", "{{" + P + "run_phase}}"),
        ]),
        ("Phase entries", "short", [
            (f"sum by ({P}run_phase) (increase({m('run_phase_entries_total')}[{RATE}]))", "{{" + P + "run_phase}}"),
        ]),
        ("Run failures (last hour), by the phase they failed in", "short", [
            (f"sum by ({P}run_phase) (increase({m('run_failures_total')}[1h]))", "{{" + P + "run_phase}}"),
        ]),
        ("Run duration, p50 and p90", "s", [
            (quantile(0.5, "run_duration_seconds", f"{P}run_method"), "p50 {{" + P + "run_method}}"),
            (quantile(0.9, "run_duration_seconds", f"{P}run_method"), "p90 {{" + P + "run_method}}"),
        ]),
        ("Service operations (pause, cancel, ...), by outcome", "short", [
            (f"sum by ({P}service_operation, {P}service_outcome) "
             f"(increase({m('service_operation_attempts_total')}[{RATE}]))",
             "{{" + P + "service_operation}} {{" + P + "service_outcome}}"),
        ]),
        ("Service operation duration, p90", "s", [
            (quantile(0.9, "service_operation_duration_seconds", f"{P}service_operation"),
             "{{" + P + "service_operation}}"),
        ]),
    ]),
    ("Supervised fine-tuning", [
        ("Loss", "short", [(job("sft_loss"), RUN_LEGEND),
                           (job("sft_validation_loss"), "validation " + RUN_LEGEND)]),
        ("Learning rate", "short", [(job("sft_learning_rate"), RUN_LEGEND)]),
        ("Gradient norm", "short", [(job("sft_grad_norm"), RUN_LEGEND)]),
        ("Token accuracy", "percentunit", [(job("sft_token_accuracy_ratio"), RUN_LEGEND)]),
        ("Tokens per second", "short", [(job("sft_throughput_per_second"), RUN_LEGEND)]),
        ("MFU", "percentunit", [(job("sft_mfu_ratio"), RUN_LEGEND)]),
        ("Steps per second", "short", [(f"rate({job('sft_step_count_total')}[{RATE}])", RUN_LEGEND)]),
        ("Step phases", "s", [(job("sft_step_phase_duration_seconds"),
                               RUN_LEGEND + " {{" + P + "sft_step_phase}}")]),
        ("Padding", "percentunit", [(job("sft_padding_ratio"), RUN_LEGEND)]),
        ("Peak memory", "bytes", [(job("sft_memory_allocated_peak_bytes"), "allocated " + RUN_LEGEND),
                                  (job("sft_memory_reserved_peak_bytes"), "reserved " + RUN_LEGEND)]),
    ]),
    ("Reinforcement learning", [
        ("Reward, mean and spread", "short", [(job("rl_reward_mean"), "mean " + RUN_LEGEND),
                                              (job("rl_reward_std"), "std " + RUN_LEGEND)]),
        ("Reward by term", "short", [(job("rl_reward_term_mean"), RUN_LEGEND + " {{" + P + "rl_term}}")]),
        ("KL and entropy", "short", [(job("rl_kl"), "KL " + RUN_LEGEND),
                                     (job("rl_entropy"), "entropy " + RUN_LEGEND)]),
        ("Clipped tokens", "percentunit", [(job("rl_clip_ratio_low_ratio"), "low " + RUN_LEGEND),
                                           (job("rl_clip_ratio_high_ratio"), "high " + RUN_LEGEND)]),
        ("Completion length", "short", [(job("rl_completion_length_mean"), "mean " + RUN_LEGEND),
                                        (job("rl_completion_length_max"), "max " + RUN_LEGEND)]),
        ("Groups with no reward spread, truncated completions", "percentunit", [
            (job("rl_group_zero_std_ratio"), "zero-std groups " + RUN_LEGEND),
            (job("rl_completion_truncated_ratio"), "truncated " + RUN_LEGEND)]),
        ("Step phases (generation, reward, old log-probabilities, actor update)", "s", [
            (job("rl_step_phase_duration_seconds"), RUN_LEGEND + " {{" + P + "rl_step_phase}}")]),
        ("Tokens per second", "short", [(job("rl_throughput_per_second"), RUN_LEGEND)]),
        ("Grader failures and tokens", "short", [
            (f"sum by ({P}rl_term, {P}rl_grader_failure_cause) "
             f"(increase({job('rl_grader_failures_total')}[{RATE}]))",
             "failed {{" + P + "rl_term}} {{" + P + "rl_grader_failure_cause}}"),
            (f"sum by ({P}rl_term, {P}rl_grader_token_type) (rate({job('rl_grader_tokens_total')}[{RATE}]))",
             "tokens/s {{" + P + "rl_term}} {{" + P + "rl_grader_token_type}}"),
        ]),
    ]),
    ("Checkpoints", [
        ("Checkpoint duration, p90, by operation and outcome", "s", [
            (quantile(0.9, "checkpoint_duration_seconds", f"{P}checkpoint_operation, {P}checkpoint_outcome", RUN),
             "{{" + P + "checkpoint_operation}} {{" + P + "checkpoint_outcome}}")]),
        ("Bytes moved", "Bps", [
            (f"sum by ({P}checkpoint_operation, {P}checkpoint_artifact_kind) "
             f"(rate({m('checkpoint_transfer_size_bytes')}_sum{{{RUN}}}[{RATE}]))",
             "{{" + P + "checkpoint_operation}} {{" + P + "checkpoint_artifact_kind}}")]),
        ("Publications pending", "short", [(job("checkpoint_publication_pending"), RUN_LEGEND)]),
    ]),
    ("Devices", [
        ("GPU memory utilization", "percentunit", [
            (job("gpu_memory_utilization_ratio"), RUN_LEGEND + " {{hw_id}}")]),
        ("GPU Xid errors (last hour)", "short", [
            (f"sum by (hw_id) (increase({job('gpu_xid_count_total')}[1h]))", "{{hw_id}}")]),
    ]),
]

VARIABLES = [
    ("workload", "Workload", f"label_values({m('workload_devices_quota')}, {P}workload)"),
    ("run", "Run", f"label_values({m('job_devices')}{{{WORKLOAD}}}, {P}run_id)"),
    ("attempt", "Attempt", f'label_values({m("job_devices")}{{{P}run_id=~"$run"}}, {P}run_attempt)'),
]


def variable(name: str, label: str, query: str) -> dict:
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": f"{name}-values"}, "definition": query,
            "refresh": 2, "sort": 1, "multi": True, "includeAll": True, "allValue": ".*",
            "current": {"selected": True, "text": ["All"], "value": ["$__all"]}, "options": [], "hide": 0}


def dashboard() -> dict:
    panels = []
    ids = iter(range(1, 1000))
    y = 0
    for row_title, row_panels in ROWS:
        panels.append({"type": "row", "title": row_title, "id": next(ids), "collapsed": False, "panels": [],
                       "gridPos": {"h": 1, "w": 24, "x": 0, "y": y}})
        y += 1
        for i, (title, unit, queries) in enumerate(row_panels):
            panels.append({
                "type": "timeseries", "title": title, "id": next(ids), "datasource": DATASOURCE,
                "gridPos": {"h": 8, "w": 12, "x": 12 * (i % 2), "y": y + 8 * (i // 2)},
                "fieldConfig": {"defaults": {"unit": unit, "custom": {"spanNulls": True}}, "overrides": []},
                "options": {"legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
                            "tooltip": {"mode": "multi", "sort": "desc"}},
                "targets": [{"refId": chr(ord("A") + k), "datasource": DATASOURCE, "expr": expr,
                             "legendFormat": legend, "range": True} for k, (expr, legend) in enumerate(queries)],
            })
        y += 8 * ((len(row_panels) + 1) // 2)
    return {
        "__inputs": [{"name": "DS_PROMETHEUS", "label": "Prometheus", "description": "scrapes trainerd's /metrics",
                      "type": "datasource", "pluginId": "prometheus", "pluginName": "Prometheus"}],
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.0.0"},
                       {"type": "datasource", "id": "prometheus", "name": "Prometheus", "version": "1.0.0"},
                       {"type": "panel", "id": "timeseries", "name": "Time series", "version": ""}],
        "title": "trainer: capacity, runs and training",
        "uid": "trainer-overview",
        "description": "Generated by tools/gen_grafana.py from telemetry/registry.yaml's metric names.",
        "tags": ["trainer"],
        "editable": True,
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-6h", "to": "now"},
        "refresh": "30s",
        "timezone": "",
        "annotations": {"list": []},
        "links": [],
        "templating": {"list": [variable(*v) for v in VARIABLES]},
        "panels": panels,
    }


# What Prometheus reads in place of Grafana's own variables: every run, every workload, a minute.
GRAFANA_ONLY = {"$__rate_interval": "1m", "$run": ".*", "$workload": ".*", "$attempt": ".*"}


def evaluable_queries() -> list[tuple[str, str]]:
    """(panel or variable, query) for every query of the dashboard, with Grafana's variables
    replaced by GRAFANA_ONLY; a variable's label_values(SELECTOR, LABEL) becomes SELECTOR."""
    out = []
    for name, _, query in VARIABLES:
        selector = query.removeprefix("label_values(").rsplit(",", 1)[0]
        out.append((f"variable {name}", selector))
    for _, row_panels in ROWS:
        for title, _, queries in row_panels:
            out.extend((title, expr) for expr, _ in queries)
    for grafana, value in GRAFANA_ONLY.items():
        out = [(title, expr.replace(grafana, value)) for title, expr in out]
    return out


def names_and_labels(expr: str) -> tuple[set[str], set[str]]:
    """The metric names a PromQL expression selects and the labels it matches or groups by."""
    labels = set()
    for matchers in re.findall(r"\{([^}]*)\}", expr):
        labels |= set(re.findall(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)", matchers))
    for grouping in re.findall(r"\b(?:by|without)\s*\(([^)]*)\)", expr):
        labels |= {g.strip() for g in grouping.split(",") if g.strip()}
    bare = re.sub(r"\{[^}]*\}", "", re.sub(r"\b(?:by|without)\s*\([^)]*\)", "", expr))
    return set(re.findall(r"\b" + P + r"[a-zA-Z0-9_]*", bare)), labels


def render() -> str:
    return json.dumps(dashboard(), indent=2, ensure_ascii=False) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the committed file differs")
    args = parser.parse_args()
    text = render()
    if args.check:
        if not OUT.exists() or OUT.read_text() != text:
            print(f"{OUT.relative_to(ROOT)} is not what tools/gen_grafana.py writes: run it", file=sys.stderr)
            return 1
        return 0
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
