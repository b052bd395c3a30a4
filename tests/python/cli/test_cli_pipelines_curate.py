"""A pipeline's `curate` stage (issue 26, docs/pipelines.md) through the real CLI against a real
trainerd and a real HTTP judge (curation_support.py): curate → train on `@curate` → evaluate on
`@curate` to COMPLETED, the run trained on exactly the dataset version the curation registered and
each candidate judged once, `resume` starting no second curation; trainerd SIGKILLed mid-curation
follows the same curation after its restart, judging nothing twice; `cancel` while the curation
judges ends the pipeline CANCELLED and the curation runs to completion; a curation that keeps
nothing interrupts the pipeline and `resume` starts a new attempt's curation; a curate stage with a bad
field is refused naming `stages[i].curation.FIELD` and creates nothing."""
from __future__ import annotations

import json
import signal
import urllib.request

import pytest

from cli_support import MODEL_NAME, WORKLOAD, Cli, call, prepare, start_trainerd, stop, wait_for
from curation_support import THRESHOLD, canonical, config, judge, score_of  # noqa: F401 (judge: a fixture)
from pipeline_support import counts, evaluate_stage, get, pipeline, start, train_stage, wait_end


@pytest.fixture
def service(bin_dir, tiny_model, judge, tmp_path):
    """A trainerd of its own that knows the test judge, and its CLI with the tiny model, the
    sentiment dataset and a workload ready."""
    svc = start_trainerd(bin_dir, tmp_path / "svc",
                         {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], **config(judge)})
    try:
        yield svc, prepare(Cli(bin_dir / "trainer", svc.url))
    finally:
        stop(svc.proc, svc.data_dir)


def session(cli: Cli, tmp_path, numbers) -> tuple[str, list[str]]:
    path, answers = canonical(tmp_path, "calls.jsonl", numbers)
    return cli("sessions", "create", "-f", path, "--source", "canonical", check=True).stdout.strip(), answers


def curate_stage(name: str, hashes: list[str], **over) -> dict:
    return {"name": name, "type": "curate",
            "curation": {"sessionHashes": hashes, "source": "canonical", "threshold": THRESHOLD,
                         "dataset": "support", "systemPrompt": "You are a support agent.", "judge": "test-judge",
                         **over}}


def stage_durations(url: str, outcome: str) -> list[str]:
    """The stage-duration histogram's count series of curate stages with `outcome`."""
    with urllib.request.urlopen(url + "/metrics") as r:
        metrics = r.read().decode()
    return [line for line in metrics.splitlines()
            if line.startswith("akka_optimize_training_pipeline_stage_duration_seconds_count{") and
            'pipeline_stage_type="curate"' in line and f'pipeline_stage_outcome="{outcome}"' in line]


def curated_train_stage(name: str) -> dict:
    stage = train_stage(name)
    stage["config"]["dataset"] = "@curate"
    return stage


def test_curate_train_evaluate_completes_training_on_exactly_the_curated_version(service, judge, tmp_path):
    svc, cli = service
    digest, answers = session(cli, tmp_path, range(20))
    kept = [a for a in answers if score_of(a) >= THRESHOLD]
    assert 0 < len(kept) < len(answers)
    plan = pipeline(curate_stage("curate", [digest]), curated_train_stage("train"),
                    evaluate_stage("score", "@train", dataset="@curate"))
    pid = start(cli, plan)["pipelineId"]
    final = wait_end(cli, pid)
    assert final["phase"] == "COMPLETED", (final["failureReason"], final["stages"])
    curate, train, score = final["stages"]
    assert [s["state"] for s in final["stages"]] == ["COMPLETED"] * 3, final

    # The curation: its id derived from the pipeline and the stage, every candidate judged once.
    assert curate["curationId"] == f"pipeline-{pid}-curate", curate
    curation = cli.json("curations", "get", curate["curationId"])
    assert curation["phase"] == "COMPLETED" and curation["accepted"] == len(kept), curation
    assert judge.verdicts == {a: 1 for a in answers}
    registered = curation["result"]["dataset"]["hash"]
    assert registered == cli.json("datasets", "get", "support")["hash"]
    assert curate["output"]["kind"] == "dataset" and curate["output"]["id"] == registered, curate

    # The train stage's run trained on exactly that version; the evaluation scored on it.
    run = cli.json("runs", "get", train["runId"])
    assert run["phase"] == "COMPLETED" and run["dataset"]["hash"] == registered, run["dataset"]
    assert run["pipeline"] == {"pipelineId": pid, "stage": "train"}
    evaluation = cli.json("evaluations", "get", score["evaluationId"])
    assert evaluation["dataset"]["hash"] == registered

    text = cli("pipelines", "get", pid, check=True).stdout
    assert f"curation pipeline-{pid}-curate" in text and "dataset support" in text, text

    assert stage_durations(svc.url, "success"), "no curate stage duration recorded"

    # A resume of a finished pipeline starts nothing: still one curation, no verdict asked again.
    assert cli.json("pipelines", "resume", pid)["resumed"] is False
    assert [c["curationId"] for c in cli.json("curations", "list")["curations"]] == [curate["curationId"]]
    assert judge.verdicts == {a: 1 for a in answers}


def test_cancel_while_the_curation_judges_ends_the_pipeline_and_the_curation_runs_to_completion(
        service, judge, tmp_path):
    svc, cli = service
    digest, answers = session(cli, tmp_path, range(12))
    judge.hold_after = 3  # the judge answers 3 calls, then holds every further one
    pid = start(cli, pipeline(curate_stage("curate", [digest]), curated_train_stage("train")))["pipelineId"]
    curation_id = wait_for(lambda: get(cli, pid)["stages"][0]["curationId"], timeout=120, what="the stage's curation")
    wait_for(lambda: cli.json("curations", "get", curation_id)["progress"]["judged"] == 3, 120, "3 scores stored")
    cli("pipelines", "cancel", pid, "--force", check=True)
    p = get(cli, pid)
    assert p["phase"] == "CANCELLED" and [s["state"] for s in p["stages"]] == ["CANCELLED", "SKIPPED"], p
    assert "cannot be cancelled and runs to completion" in p["stages"][0]["failure"], p["stages"][0]
    assert cli.json("curations", "get", curation_id)["phase"] == "JUDGING"
    assert stage_durations(svc.url, "failure"), "no curate stage duration recorded for the cancelled stage"
    judge.release()
    done = wait_for(lambda: (c := cli.json("curations", "get", curation_id))["phase"] == "COMPLETED" and c,
                    timeout=120, what="the curation COMPLETED")
    assert done["progress"]["judged"] == len(answers) and judge.verdicts == {a: 1 for a in answers}
    assert done["result"]["dataset"]["hash"] == cli.json("datasets", "get", "support")["hash"]
    # The pipeline stays cancelled: the train stage never started.
    after = get(cli, pid)
    assert after["phase"] == "CANCELLED" and after["stages"][1]["runId"] is None, after
    assert [r for r in cli.json("runs", "list", "--limit", "50")["runs"] if r.get("pipeline")] == []


def test_trainerd_killed_mid_curation_follows_the_same_curation_and_judges_nothing_twice(
        bin_dir, tiny_model, judge, tmp_path):
    settings = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], **config(judge)}
    svc = start_trainerd(bin_dir, tmp_path / "svc", settings)
    try:
        cli = prepare(Cli(bin_dir / "trainer", svc.url))
        digest, answers = session(cli, tmp_path, range(16))
        judge.hold_after = 5  # the judge answers 5 calls, then holds every further one
        pid = start(cli, pipeline(curate_stage("curate", [digest]), curated_train_stage("train")))["pipelineId"]
        curation_id = wait_for(lambda: get(cli, pid)["stages"][0]["curationId"], timeout=120, what="the curation")
        wait_for(lambda: cli.json("curations", "get", curation_id)["progress"]["judged"] == 5, 120, "5 scores stored")
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait(timeout=30)
        judge.restart()
        svc = start_trainerd(bin_dir, tmp_path / "svc", settings)
        cli = Cli(bin_dir / "trainer", svc.url)
        final = wait_end(cli, pid)
        assert final["phase"] == "COMPLETED", (final["failureReason"], final["stages"])
        # The same curation followed, no second one started, every candidate given one verdict.
        assert final["stages"][0]["curationId"] == curation_id and final["stages"][0]["previousAttempts"] == []
        assert [c["curationId"] for c in cli.json("curations", "list")["curations"]] == [curation_id]
        assert judge.verdicts == {a: 1 for a in answers}
        registered = cli.json("curations", "get", curation_id)["result"]["dataset"]["hash"]
        assert cli.json("runs", "get", final["stages"][1]["runId"])["dataset"]["hash"] == registered
    finally:
        stop(svc.proc, svc.data_dir)


def test_a_curate_stage_with_a_bad_field_is_refused_naming_it_and_creates_nothing(service, judge, tmp_path):
    svc, cli = service
    digest, _ = session(cli, tmp_path, range(4))
    before = counts(cli)
    no_threshold = curate_stage("curate", [digest])
    del no_threshold["curation"]["threshold"]
    cases = [
        (pipeline({"name": "curate", "type": "curate"}), "stages[0].curation", "required"),
        (pipeline(no_threshold), "stages[0].curation.threshold", "required"),
        (pipeline(curate_stage("curate", [digest], threshold=2)), "stages[0].curation.threshold", "from 0 to 1"),
        (pipeline(curate_stage("curate", [digest], curationId="mine")), "stages[0].curation.curationId",
         "takes its id from the pipeline"),
        (pipeline(curate_stage("curate", ["0" * 64])), "stages[0].curation.sessionHashes[0]", "stage 'curate'"),
        (pipeline(curate_stage("curate", [digest], source="otel")), "stages[0].curation.source", "not otel"),
        (pipeline(curate_stage("curate", [digest], judge="no-such-judge")), "stages[0].curation.judge",
         "no-such-judge"),
        (pipeline(curate_stage("curate", [digest], colour="blue")), "stages[0].curation.colour", "unknown field"),
        (pipeline(curate_stage("curate", [digest]), curate_stage("again", [digest], dataset="@curate")),
         "stages[1].curation.dataset", "an @ reference is not allowed here"),
        (pipeline({**curate_stage("curate", [digest]), "dataset": "support"}), "stages[0].dataset", "unknown field"),
        # A distill stage whose source is the curation's output: its other fields are checked now.
        (pipeline(curate_stage("curate", [digest]),
                  {"name": "distill", "type": "distill",
                   "distillation": {"workload": WORKLOAD, "teacher": "no-such-teacher", "from": "@curate",
                                    "to": "distilled"}}),
         "stages[1].distillation.teacher", "no-such-teacher"),
    ]
    for plan, field, message in cases:
        status, answer = call(f"{svc.url}/v1/pipelines", "POST", plan)
        assert status in (400, 404, 412) and answer["error"]["field"] == field, (field, status, answer)
        assert message in answer["error"]["message"], (field, answer)
    # Through the CLI: the field named, exit 1; a dry run of a good curate stage starts nothing.
    out = cli("pipelines", "start", "-f", "-", "--force", input=json.dumps(cases[1][0]))
    assert out.returncode == 1 and "stages[0].curation.threshold" in out.stderr, out.stderr
    dry = cli.json("pipelines", "start", "-f", "-", "--dry-run",
                   input=json.dumps(pipeline(curate_stage("curate", [digest]), curated_train_stage("train"))))
    assert [s["type"] for s in dry["stages"]] == ["curate", "train"] and "support" in dry["stages"][0]["resolution"]
    assert counts(cli) == before
    assert cli.json("curations", "list")["curations"] == [] and judge.verdicts == {}


def test_a_curation_that_keeps_nothing_interrupts_the_pipeline_and_resume_starts_a_new_attempt(
        service, judge, tmp_path):
    _, cli = service
    digest, answers = session(cli, tmp_path, range(6))
    assert all(score_of(a) < 0.99 for a in answers)
    plan = pipeline(curate_stage("curate", [digest], threshold=0.99), curated_train_stage("train"))
    pid = start(cli, plan)["pipelineId"]
    first = wait_end(cli, pid)
    assert first["phase"] == "INTERRUPTED" and [s["state"] for s in first["stages"]] == ["FAILED", "PENDING"], first
    assert "its curation ended FAILED" in first["stages"][0]["failure"] and "nothing was registered" in \
        first["failureReason"], first
    assert first["stages"][1]["runId"] is None
    resumed = cli.json("pipelines", "resume", pid)
    assert resumed["resumed"] is True
    second = wait_for(lambda: (p := get(cli, pid))["phase"] == "INTERRUPTED" and p, timeout=120,
                      what="the second attempt's end")
    curate = second["stages"][0]
    assert curate["curationId"] == f"pipeline-{pid}-curate-attempt-2", curate
    assert [a["curationId"] for a in curate["previousAttempts"]] == [f"pipeline-{pid}-curate"]
    assert sorted(c["curationId"] for c in cli.json("curations", "list")["curations"]) == sorted(
        [f"pipeline-{pid}-curate", f"pipeline-{pid}-curate-attempt-2"])
    assert judge.verdicts == {a: 2 for a in answers}  # once per attempt, each its own curation
