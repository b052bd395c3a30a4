"""An RL plan that asks for more than one GPU (issue 13): GRPO and GSPO train on one device, so the
run holds execution.gpus devices and trains on one. The real `trainer` CLI against a real trainerd
says so at submission (`--dry-run`, and when the run starts), the real job reports it as a
`warning` event, and `runs get` and the run's events show it. An SFT plan with the same count
trains data-parallel and gets no such warning."""
from __future__ import annotations

import json
import re
import urllib.request

import pytest

from toy_rl_service import toy_rl_service

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "rl-devices"
WARNING = ("execution.gpus is 2, but grpo trains on one device: the run holds 2 devices and trains on one of them "
           "(data parallelism is SFT only; docs/data-parallel.md). Set execution.gpus: 1 to hold one.")


@pytest.fixture(scope="module")
def service(bin_dir, tmp_path_factory):
    # Two CPU slots: a run with execution.gpus 2 holds both (no GPU pool is declared).
    pools = {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 2}]}
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, rows=16,
                        config=pools) as service:
        yield service


def plan(method: str = "grpo", gpus: int = 2) -> str:
    lines = ["kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
             f"  method: {method}", "  maxSeqLength: 64", "  model: {precision: FP32}",
             "  hyperparams:", "    lora: {rank: 8, alpha: 16}", "    training: {maxSteps: 2, seed: 3}"]
    if method != "sft":
        lines += ["  reward: {terms: [{kind: json-label-match}]}",
                  "  rlHyperparams:", "    groupSize: 4", "    promptsPerStep: 2", "    maxCompletionLength: 6",
                  "    microBatchSize: 8"]
    return "\n".join(lines + [f"execution: {{gpus: {gpus}}}"]) + "\n"


def test_a_dry_run_says_an_rl_plan_trains_on_one_of_its_gpus(service):
    _, cli = service
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan())
    assert out.returncode == 0, out.stdout + out.stderr
    assert f"Warning: {WARNING}\n" in out.stderr, out.stderr
    answer = cli.json("runs", "start", "-f", "-", "--dry-run", input=plan())
    assert answer["warnings"] == [{"field": "execution.gpus", "message": WARNING}]
    # SFT trains on both: nothing to say.
    sft = cli.json("runs", "start", "-f", "-", "--dry-run", input=plan(method="sft"))
    assert "warnings" not in sft or not [w for w in sft["warnings"] if w["field"] == "execution.gpus"], sft
    assert "grpo" not in cli("runs", "start", "-f", "-", "--dry-run", input=plan(gpus=1)).stderr


def test_the_job_reports_it_and_runs_get_and_the_events_show_it(service):
    daemon, cli = service
    out = cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan())
    assert out.returncode == 0, out.stdout + out.stderr
    started = json.loads(out.stdout)
    run_id = started["runId"]
    assert started["warnings"] == [{"field": "execution.gpus", "message": WARNING}]
    cli("runs", "wait", run_id, "--timeout", "10m", "--exit-status", "-q", check=True)
    run = cli.json("runs", "get", run_id)
    assert run["phase"] == "COMPLETED"
    assert run["warnings"] == [{"field": "execution.gpus", "message": WARNING}]
    assert run["placement"]["gpus"] == 0 and run["progress"]["step"] == 2  # held two CPU slots, trained
    with urllib.request.urlopen(f"{daemon.url}/v1/runs/{run_id}/events?after=0", timeout=30) as r:
        events = json.load(r)["events"]
    warnings = [e for e in events if e["type"] == "warning"]
    assert [(e["field"], e["message"]) for e in warnings] == [("execution.gpus", WARNING)]
    text = cli("runs", "get", run_id)
    assert text.returncode == 0
    assert re.search(r"Warning:\s+" + re.escape(WARNING[:60]), text.stdout), text.stdout
