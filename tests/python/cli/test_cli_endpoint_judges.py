"""Judges on our own endpoints (issue 24): a `model:` reward term may name a model trainerd serves
itself (here the toy policy's base model). The run passes DEPLOYING_GRADER, which creates (or
finds) an endpoint serving it, and WAITING_FOR_GRADER until that endpoint is READY; the job's
judge calls go through trainerd's forwarding route (counted on /metrics); while a run uses the
judge, the endpoint refuses to take it down, detach it or disable it, naming the run.

The toy policy is no grader: its replies carry no verdict, so each call scores 0 with cause
`no_verdict`; what is checked is where the calls go and what the endpoint allows meanwhile."""
from __future__ import annotations

import urllib.request

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, phases, plan, run_to_end
from toy_rl_service import toy_rl_service
from waiting import wait_for

pytestmark = pytest.mark.timeout(1200)

TERM = f"{{kind: 'model:{MODEL}', maxConsecutiveFailures: 1000000, timeoutSeconds: 60}}"


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    # Two CPU devices: one for the judge's endpoint, one for the run's job.
    config = {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}]}
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                        config=config) as (service, cli):
        cli.service = service
        yield cli


def requests_to(cli, endpoint: str, model: str) -> float:
    text = urllib.request.urlopen(cli.service.url + "/metrics", timeout=10).read().decode()
    series = f'trainer_endpoint_requests_total{{endpoint="{endpoint}",model="{model}",outcome="ok"}} '
    found = [line for line in text.splitlines() if line.startswith(series)]
    return float(found[0].split()[-1]) if found else 0.0


def test_a_model_judge_is_deployed_at_an_endpoint_and_called_through_trainerd(cli, tmp_path):
    run, steps = run_to_end(cli, plan(TERM), tmp_path)
    p = phases(run)
    assert p.index("DEPLOYING_GRADER") < p.index("WAITING_FOR_GRADER") < p.index("SUBMITTING"), p
    judge = run["judgeEndpoints"][MODEL]
    eid = judge["endpointId"]
    assert judge["model"] == MODEL, judge
    e = cli.json("endpoints", "get", eid)
    assert e["phase"] == "READY" and [m["name"] for m in e["models"]] == [MODEL], e
    assert e["workload"]["name"] == WORKLOAD
    # Every call of the job went to trainerd's route of that endpoint (retries included).
    calls = sum(len(s["rl"]["terms"][0]["callSeconds"]) for s in steps)
    assert calls >= 2 * 2 * 2, steps
    assert requests_to(cli, eid, MODEL) >= calls
    assert sum(s["rl"]["terms"][0]["failures"] for s in steps) > 0  # the toy policy gives no verdict

    # A second run with the same judge finds the same endpoint: no new one.
    again, _ = run_to_end(cli, plan(TERM, steps=1), tmp_path)
    assert again["judgeEndpoints"][MODEL]["endpointId"] == eid
    assert len(cli.json("endpoints", "list", "--phase", "active")["endpoints"]) == 1
    # No run uses it now: it may go.
    cli("endpoints", "delete", eid, check=True)
    wait_for(lambda: cli.json("endpoints", "get", eid)["phase"] == "DELETED", 60, "the judge's endpoint to go")


def test_an_endpoint_refuses_to_drop_the_judge_of_a_running_run(cli, tmp_path):
    f = tmp_path / "long.yaml"
    f.write_text(plan(TERM, steps=100000))
    run_id = cli("runs", "start", "-f", f, "--force", "--jq", ".runId", check=True).stdout.strip()
    run = wait_for(lambda: (lambda r: r if r["phase"] in ("TRAINING", "FAILED", "COMPLETED") else None)(
        cli.json("runs", "get", run_id)), 600, "the run to train")
    assert run["phase"] == "TRAINING", run
    eid = run["judgeEndpoints"][MODEL]["endpointId"]
    for args in (("delete", eid), ("detach", eid, MODEL), ("disable", eid, MODEL)):
        out = cli("endpoints", *args)
        assert out.returncode == 1 and f"called by run {run_id}" in out.stderr, (args, out.stderr)
    e = cli.json("endpoints", "get", eid)
    assert e["phase"] == "READY" and e["models"][0]["enabled"] is True, e
    cli("runs", "cancel", run_id, "--force", check=True)
    wait_for(lambda: cli.json("runs", "get", run_id)["phase"] == "CANCELLED", 300, "the run to be cancelled")
    cli("endpoints", "disable", eid, MODEL, check=True)  # allowed once the run has ended
    cli("endpoints", "delete", eid, check=True)


def test_a_judge_that_is_neither_declared_nor_served_is_refused_at_submission(cli):
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan("{kind: 'model:nobody'}"))
    assert out.returncode != 0
    assert "config.reward.terms[0].kind" in out.stderr and "judge 'nobody' is neither declared" in out.stderr, out.stderr
    assert "nor a model it serves" in out.stderr and "nobody" in out.stderr, out.stderr
