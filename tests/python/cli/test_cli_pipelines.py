"""`trainer pipelines` (issue 26, docs/pipelines.md) through the real CLI against a real trainerd:
a train → evaluate → train pipeline (the last warm-starting from `@train`) to COMPLETED with its
stage runs linked; the SSE stream's snapshots are those of `pipelines wait -o json`; a gate below
its minimum stops the pipeline FAILED, naming the gate and the score, with later stages never
started; trainerd SIGKILLed while a stage runs and restarted runs no finished stage again;
`cancel` ends the running stage and frees its claim; bad plans are refused by field and create
nothing."""
from __future__ import annotations

import json
import os
import signal
import threading
import urllib.request

import pytest

from cli_support import (DATASET_NAME, MODEL_NAME, WORKLOAD, Cli, call, free_port, kill_job_of, prepare, start_trainerd,
                         stop, wait_for)
from pipeline_support import counts, evaluate_stage, get, held_out, pipeline, start, train_stage, wait_end


@pytest.fixture(scope="module")
def setup(ready, tmp_path_factory):
    held_out(ready, tmp_path_factory.mktemp("pipelines"))
    return ready


def sse_snapshots(url: str, out: list, done: threading.Event) -> None:
    """Reads GET URL (Server-Sent Events) until its `end` event: each `pipeline` event's data."""
    with urllib.request.urlopen(url, timeout=900) as r:
        event = None
        for raw in r:
            line = raw.decode().rstrip("\n")
            if line.startswith("event: "):
                event = line[len("event: "):]
            elif line.startswith("data: ") and event == "pipeline":
                out.append(json.loads(line[len("data: "):]))
            elif line.startswith("data: ") and event == "end":
                break
    done.set()


def test_train_evaluate_train_completes_with_its_stage_runs_linked(setup, trainerd):
    cli = setup
    plan = pipeline(train_stage("train"),
                    evaluate_stage("score", "@train", gate={"minMeanScore": 0.0}),
                    train_stage("again", warmStartModelId="@train"),
                    description="pipeline test")
    p = start(cli, plan)
    pid = p["pipelineId"]
    assert p["phase"] == "RUNNING" and [s["state"] for s in p["stages"]] == ["PENDING"] * 3, p
    streamed: list = []
    done = threading.Event()
    reader = threading.Thread(target=sse_snapshots, args=(f"{trainerd.url}/v1/pipelines/{pid}/events", streamed, done),
                              daemon=True)
    reader.start()
    waited = cli("pipelines", "wait", pid, "-o", "json", "--timeout", "15m", "--exit-status", timeout=1000)
    assert waited.returncode == 0, waited.stderr
    lines = [json.loads(line) for line in waited.stdout.splitlines() if line.strip()]
    final = get(cli, pid)
    assert final["phase"] == "COMPLETED", final
    assert [s["state"] for s in final["stages"]] == ["COMPLETED"] * 3, final
    train, score, again = final["stages"]
    assert train["runId"] and again["runId"] and score["evaluationId"], final
    assert train["output"]["modelId"] and score["meanScore"] is not None and score["gate"]["passed"] is True
    # Each stage is a run or an evaluation linked to the pipeline and its stage.
    for stage in (train, again):
        run = cli.json("runs", "get", stage["runId"])
        assert run["phase"] == "COMPLETED" and run["pipeline"] == {"pipelineId": pid, "stage": stage["name"]}, run
    assert cli.json("runs", "get", again["runId"])["warmStart"]["modelId"] == train["output"]["modelId"]
    evaluation = cli.json("evaluations", "get", score["evaluationId"])
    assert evaluation["model"]["runId"] == train["runId"] or evaluation["model"]["modelId"] == train["output"]["modelId"]
    # `runs list` shows the stage runs' pipeline and stage.
    table = cli("runs", "list", check=True).stdout.splitlines()
    assert "PIPELINE" in table[0].split(), table[0]
    for stage in (train, again):
        row = next(line for line in table if line.startswith(stage["runId"][:12]))
        assert f"{pid[:12]}/{stage['name']}" in row.split(), row
    listed = cli.json("runs", "list", "--limit", "500")["runs"]
    assert {r["runId"]: r.get("pipeline", {}).get("stage") for r in listed if r.get("pipeline")} == \
        {train["runId"]: "train", again["runId"]: "again"}
    # `pipelines get` as text: a row per stage with what it ran and made.
    text = cli("pipelines", "get", pid, check=True).stdout
    assert "COMPLETED" in text and f"run {train['runId'][:12]}" in text and "mean score" in text, text
    # The SSE stream and `wait -o json` give the same snapshots: the same shape, the same end.
    assert done.wait(60), "the event stream did not end"
    assert streamed and lines, (streamed, lines)
    assert streamed[-1] == lines[-1] == final
    assert all(set(s) == set(final) for s in streamed + lines)
    assert len({json.dumps(s, sort_keys=True) for s in streamed}) == len(streamed)  # one event per change
    # Listed (newest first), and its gauges and stage durations recorded.
    assert cli.json("pipelines", "list")["pipelines"][0]["pipelineId"] == pid
    assert pid not in [x["pipelineId"] for x in cli.json("pipelines", "list", "--phase", "open")["pipelines"]]
    with urllib.request.urlopen(trainerd.url + "/metrics") as r:
        metrics = r.read().decode()
    assert 'akka_optimize_training_pipeline_active{' in metrics, metrics
    for kind in ("train", "evaluate"):
        assert any(line.startswith("akka_optimize_training_pipeline_stage_duration_seconds_count{") and
                   f'pipeline_stage_type="{kind}"' in line and 'pipeline_stage_outcome="success"' in line
                   for line in metrics.splitlines()), kind
    # Every relayed job signal of a stage's run carries the pipeline's id and the stage's name.
    for stage in (train, again):
        series = [line for line in metrics.splitlines()
                  if not line.startswith("#") and f'akka_optimize_training_run_id="{stage["runId"]}"' in line]
        assert series, f"no relayed series of run {stage['runId']}"
        assert all(f'akka_optimize_training_pipeline_id="{pid}"' in line and
                   f'akka_optimize_training_pipeline_stage_name="{stage["name"]}"' in line for line in series), series[:3]
    # annotate sets the description; an empty one clears it.
    assert cli.json("pipelines", "annotate", pid, "--description", "kept")["description"] == "kept"
    assert cli.json("pipelines", "annotate", pid, "--description", "")["description"] is None
    # resume of a pipeline that was not interrupted changes nothing.
    resumed = cli.json("pipelines", "resume", pid)
    assert resumed["resumed"] is False and "not interrupted" in resumed["message"]


def test_a_gate_below_its_minimum_fails_the_pipeline_and_starts_nothing_after_it(setup):
    cli = setup
    before = counts(cli)
    plan = pipeline(evaluate_stage("baseline", MODEL_NAME, workload=WORKLOAD, gate={"minMeanScore": 1.0}),
                    train_stage("train"))
    pid = start(cli, plan)["pipelineId"]
    out = cli("pipelines", "wait", pid, "--timeout", "15m", "--exit-status", timeout=1000)
    assert out.returncode == 3, out.stdout + out.stderr
    p = get(cli, pid)
    assert p["phase"] == "FAILED", p
    gate, train = p["stages"]
    assert gate["state"] == "COMPLETED" and gate["gate"]["passed"] is False
    assert "the gate of stage 'baseline'" in p["failureReason"] and "minMeanScore 1.0" in p["failureReason"], p
    score = gate["meanScore"]
    assert score is None or f"{score:.6f}" in p["failureReason"], p
    assert train["state"] == "SKIPPED" and train["runId"] is None, train
    runs, evaluations, pipelines = counts(cli)
    assert (runs, evaluations, pipelines) == (before[0], before[1] + 1, before[2] + 1)


@pytest.mark.parametrize("kill_after", ["run:TRAINING", "evaluation:RUNNING"])
def test_trainerd_killed_in_a_stage_runs_no_finished_stage_again(bin_dir, tiny_model, tmp_path, kill_after):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    # One port throughout: the stage's job, which outlives the killed trainerd, publishes to it.
    port = free_port()
    service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        held_out(cli, tmp_path)
    finally:
        stop(service.proc)
    os.environ["TRAINER_TEST_KILL_AFTER"] = kill_after
    try:
        service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
    finally:
        del os.environ["TRAINER_TEST_KILL_AFTER"]
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        pid = start(cli, pipeline(train_stage("train"), evaluate_stage("score", "@train")))["pipelineId"]
        service.proc.wait(timeout=600)
        assert service.proc.returncode == -signal.SIGKILL
        service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
        cli = Cli(bin_dir / "trainer", service.url)
        before = get(cli, pid)
        train_run = before["stages"][0]["runId"]
        assert train_run, before
        cli("pipelines", "resume", pid, check=True)  # a no-op unless it was interrupted
        after = wait_end(cli, pid)
        assert after["phase"] == "COMPLETED", (after["failureReason"], after["stages"])
        assert after["stages"][0]["runId"] == train_run  # the finished or running stage was not started again
        assert [r["runId"] for r in cli.json("runs", "list", "--limit", "50")["runs"]] == [train_run]
        evaluations = cli.json("evaluations", "list", "--limit", "50")["evaluations"]
        assert [e["evaluationId"] for e in evaluations] == [after["stages"][1]["evaluationId"]], evaluations
    finally:
        stop(service.proc, service.data_dir)


def test_cancel_ends_the_running_stage_and_frees_its_claim(setup):
    cli = setup
    pid = start(cli, pipeline(train_stage("long", steps=100000), evaluate_stage("score", "@long")))["pipelineId"]
    run_id = wait_for(lambda: get(cli, pid)["stages"][0]["runId"], timeout=120, what="the stage's run")
    wait_for(lambda: cli.json("runs", "get", run_id)["phase"] == "TRAINING", timeout=300, what="the stage's run TRAINING")
    assert cli.json("runs", "get", run_id).get("claim", {}).get("state") == "GRANTED"
    refused = cli("pipelines", "cancel", pid)  # no terminal to ask on, and no --force
    assert refused.returncode == 2 and get(cli, pid)["phase"] == "RUNNING", refused.stderr
    cli("pipelines", "cancel", pid, "--force", check=True)
    p = get(cli, pid)
    assert p["phase"] == "CANCELLED" and [s["state"] for s in p["stages"]] == ["CANCELLED", "SKIPPED"], p
    run = wait_for(lambda: (r := cli.json("runs", "get", run_id))["phase"] == "CANCELLED" and r, timeout=300,
                   what="the run CANCELLED")
    assert "claim" not in run, run
    again = cli("pipelines", "cancel", pid, "--force")
    assert again.returncode == 1 and "already ended (CANCELLED)" in again.stderr, again.stderr


def test_bad_plans_are_refused_by_stage_and_field_and_create_nothing(setup, trainerd):
    cli = setup
    before = counts(cli)
    cases = [
        (pipeline(evaluate_stage("score", "@train"), train_stage("train")), "stages[0].model", "a later stage"),
        (pipeline(train_stage("train"), evaluate_stage("score", "@nosuch")), "stages[1].model",
         "no stage is named 'nosuch'"),
        (pipeline(train_stage("a", warmStartModelId="@b"), train_stage("b", warmStartModelId="@a")),
         "stages[0].warmStartModelId", "cycle"),
        (pipeline(train_stage("self", warmStartModelId="@self")), "stages[0].warmStartModelId", "itself"),
        (pipeline(train_stage("train"), train_stage("train")), "stages[1].name", "named twice"),
        (pipeline(*[{"name": f"s{i}", "type": "evaluate"} for i in range(10000)]), "stages",
         "at most 64"),
        (pipeline(train_stage("train"), train_stage("next", configName="@train")), "stages[1].configName",
         "an @ reference is not allowed here"),
        (pipeline(train_stage("train"), evaluate_stage("score", "@train", dataset="@train")), "stages[1].dataset",
         "produces a model"),
        (pipeline(train_stage("train"), train_stage("next", gate={"minMeanScore": 0.5})), "stages[1].gate",
         "no mean score to gate on"),
        (pipeline({"name": "curate", "type": "curate"}), "stages[0].curation", "required"),
        (pipeline({"name": "distill", "type": "distill"}), "stages[0].distillation", "required"),
        (pipeline(train_stage("train"), {"name": "distill", "type": "distill",
                                         "distillation": {"from": "@train"}}),
         "stages[1].distillation.from", "produces a model"),
        (pipeline(train_stage("train", config={"dataset": "no-such-dataset"})), "stages[0].config", "stage 'train'"),
        ({"kind": "run", "stages": []}, "kind", "pipeline"),
        (pipeline(), "stages", "at least one stage"),
    ]
    for plan, field, message in cases:
        status, answer = call(f"{trainerd.url}/v1/pipelines", "POST", plan)
        assert status in (400, 404, 412) and answer["error"]["field"].startswith(field), (field, status, answer)
        assert message in answer["error"]["message"], (field, answer)
    # Through the CLI: the stage and field are named, exit 1, nothing asked or started.
    out = cli("pipelines", "start", "-f", "-", "--force", input=json.dumps(cases[0][0]))
    assert out.returncode == 1 and "stages[0].model" in out.stderr and "stage 'score'" in out.stderr, out.stderr
    out = cli("pipelines", "start", "-f", "-", "--dry-run", input=json.dumps(cases[1][0]))
    assert out.returncode == 1 and "nosuch" in out.stderr, out.stderr
    assert counts(cli) == before


def test_a_dry_run_shows_each_stages_resolution_and_starts_nothing(setup):
    cli = setup
    before = counts(cli)
    plan = pipeline(train_stage("train"), evaluate_stage("score", "@train"))
    dry = cli.json("pipelines", "start", "-f", "-", "--dry-run", "--show-resolved", input=json.dumps(plan))
    assert dry["dryRun"] is True and [s["name"] for s in dry["stages"]] == ["train", "score"], dry
    resolved = dry["stages"][0]["plan"]
    assert resolved["config"]["dataset"] == cli.json("datasets", "get", DATASET_NAME)["hash"]
    assert "plan" not in dry["stages"][1] and dry["stages"][1]["references"][0]["field"] == "stages[1].model"
    text = cli("pipelines", "start", "-f", "-", "--dry-run", input=json.dumps(plan), check=True).stdout
    assert "Pipeline plan is valid: 2 stages" in text and "Nothing was started" in text, text
    # An RL stage whose reward term is the judge stage's model: its shape is checked, it waits for @judge.
    rl = train_stage("rl", config={"dataset": DATASET_NAME, "method": "grpo", "maxSeqLength": 64,
                                   "model": {"precision": "FP32"},
                                   "reward": {"terms": [{"kind": "model:@judge", "weight": 1.0}]},
                                   "rlHyperparams": {"groupSize": 2, "promptsPerStep": 2, "maxCompletionLength": 8}})
    dry = cli.json("pipelines", "start", "-f", "-", "--dry-run", input=json.dumps(pipeline(train_stage("judge"), rl)))
    assert dry["stages"][1]["references"] == [{"field": "stages[1].config.reward.terms[0].kind", "stage": 0}], dry
    out = cli("pipelines", "start", "-f", "-", "--show-resolved", input=json.dumps(plan))
    assert out.returncode == 2 and "--dry-run" in out.stderr, out.stderr
    assert counts(cli) == before


def test_a_stage_that_failed_interrupts_the_pipeline_and_resume_runs_only_that_stage_again(setup):
    cli = setup
    first = train_stage("train")
    first["execution"]["maxAttempts"] = 1  # a job killed from outside fails the run
    plan = pipeline(evaluate_stage("baseline", MODEL_NAME, workload=WORKLOAD, gate={"minMeanScore": 0.0}), first,
                    evaluate_stage("score", "@train"))
    pid = start(cli, plan)["pipelineId"]
    failed_run = wait_for(lambda: get(cli, pid)["stages"][1]["runId"], timeout=600, what="the train stage's run")
    kill_job_of(failed_run, timeout=300)
    out = cli("pipelines", "wait", pid, "--timeout", "15m", "--exit-status", timeout=1000)
    assert out.returncode == 3, out.stdout + out.stderr
    p = get(cli, pid)
    assert p["phase"] == "INTERRUPTED" and "stage 'train' did not complete" in p["failureReason"], p
    baseline = p["stages"][0]
    assert [s["state"] for s in p["stages"]] == ["COMPLETED", "FAILED", "PENDING"], p
    resumed = cli.json("pipelines", "resume", pid)
    assert resumed["resumed"] is True and resumed["pipeline"]["phase"] == "RUNNING", resumed
    done = wait_end(cli, pid)
    assert done["phase"] == "COMPLETED", (done["failureReason"], done["stages"])
    again = done["stages"][1]
    assert again["runId"] != failed_run and again["previousAttempts"][0]["runId"] == failed_run, again
    # The stage that had completed was not run again.
    assert done["stages"][0]["evaluationId"] == baseline["evaluationId"]
    assert cli.json("runs", "get", failed_run)["phase"] == "FAILED"


def test_a_model_grader_names_an_earlier_stages_model_as_model_at_name(setup):
    """The documentation's shape: a judge trained, gated on its own score, then a run whose grader
    is `model:@judge` (an RL run's reward term takes it the same way, through an endpoint of ours)."""
    cli = setup
    plan = pipeline(train_stage("judge"), evaluate_stage("judge-eval", "@judge", gate={"minMeanScore": 0.0}),
                    train_stage("sft", grader="model:@judge"))
    done = wait_end(cli, start(cli, plan)["pipelineId"])
    assert done["phase"] == "COMPLETED", (done["failureReason"], done["stages"])
    judge, _, sft = done["stages"]
    run = cli.json("runs", "get", sft["runId"])
    assert run["grader"] == f"model:{judge['output']['modelId']}", run["grader"]
    assert run["plan"]["grader"] == f"model:{judge['output']['modelId']}"
