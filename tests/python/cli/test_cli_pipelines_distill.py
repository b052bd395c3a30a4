"""A pipeline's `distill` stage (issue 26, docs/pipelines.md) through the real CLI against a real
trainerd and a real HTTP teacher (distillation_support.py): distill → train on `@distill` to
COMPLETED, the run trained on exactly the dataset version the distillation registered, the
distillation's id derived from the pipeline and the stage; trainerd SIGKILLed mid-distillation
follows the same distillation after its restart, asking at most one chunk again; `cancel` while the teacher answers ends
the pipeline CANCELLED and cancels the distillation, registering nothing; a distill stage with a
bad field, or an `@` reference where a distill stage takes none, is refused naming
`stages[i].distillation.FIELD` and creates nothing."""
from __future__ import annotations

import json
import signal

import pytest

from cli_support import MODEL_NAME, Cli, prepare, start_trainerd, stop, wait_for
from distillation_support import config, source_rows, teacher  # noqa: F401 (teacher: a fixture)
from pipeline_support import counts, get, pipeline, start, train_stage, wait_end

ROWS = 5


@pytest.fixture
def service(bin_dir, tiny_model, teacher, tmp_path):
    """A trainerd of its own that knows the test teacher, and its CLI with the tiny model, the
    sentiment dataset, a workload and the chat dataset `calls` (the distillations' source) ready."""
    svc = start_trainerd(bin_dir, tmp_path / "svc",
                         {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], **config(teacher)})
    try:
        cli = prepare(Cli(bin_dir / "trainer", svc.url))
        path = tmp_path / "calls.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in source_rows(ROWS)))
        cli("datasets", "create", "-f", path, "--name", "calls", check=True)
        yield svc, cli
    finally:
        stop(svc.proc, svc.data_dir)


def distill_stage(name: str, **over) -> dict:
    return {"name": name, "type": "distill",
            "distillation": {"workload": train_stage("x")["workload"], "teacher": "teacher-model", "from": "calls",
                             "to": "distilled", "seed": 7, **over}}


def test_distill_then_train_on_the_distilled_version_completes(service, teacher):
    svc, cli = service
    train = train_stage("train", steps=2)
    train["config"]["dataset"] = "@distill"
    pid = start(cli, pipeline(distill_stage("distill"), train))["pipelineId"]
    final = wait_end(cli, pid)
    assert final["phase"] == "COMPLETED", (final["failureReason"], final["stages"])
    distill, trained = final["stages"]

    did = distill["distillationId"]
    distillation = cli.json("distillations", "get", did)
    assert distillation["phase"] == "COMPLETED" and distillation["from"] == "calls", distillation
    registered = distillation["result"]["dataset"]
    assert distill["output"] == {"kind": "dataset", "id": registered["hash"], "distillationId": did,
                                 "dataset": registered}, distill
    assert registered["hash"] == cli.json("datasets", "get", "distilled")["hash"]
    # Every decision asked once: the smoke pass and the rest, nothing twice.
    assert teacher.answered and set(teacher.answered.values()) == {1}, teacher.answered

    # The train stage trained on exactly that version, by its content hash.
    run = cli.json("runs", "get", trained["runId"])
    assert run["phase"] == "COMPLETED" and run["dataset"]["hash"] == registered["hash"], run["dataset"]

    # resume of a finished pipeline starts nothing.
    out = cli.json("pipelines", "resume", pid)
    assert out["resumed"] is False and len(cli.json("distillations", "list")["distillations"]) == 1


def test_trainerd_killed_mid_distillation_follows_the_same_distillation(bin_dir, tiny_model, teacher, tmp_path):
    settings = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], **config(teacher)}
    svc = start_trainerd(bin_dir, tmp_path / "svc", settings)
    try:
        cli = prepare(Cli(bin_dir / "trainer", svc.url))
        path = tmp_path / "calls.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in source_rows(30)))  # 60 decisions: 3 chunks
        cli("datasets", "create", "-f", path, "--name", "calls", check=True)
        teacher.hold_after = 20  # the smoke pass's 16 and 4 of the next chunk answered; then every call waits
        train = train_stage("train", steps=2)
        train["config"]["dataset"] = "@distill"
        pid = start(cli, pipeline(distill_stage("distill"), train))["pipelineId"]
        did = wait_for(lambda: get(cli, pid)["stages"][0]["distillationId"], 120, "the stage's distillation")
        wait_for(lambda: teacher.asked_count() > 20, 120, "a call held past the smoke pass")
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait(timeout=30)
        teacher.restart()
        svc = start_trainerd(bin_dir, tmp_path / "svc", settings)
        cli = Cli(bin_dir / "trainer", svc.url)
        final = wait_end(cli, pid)
        assert final["phase"] == "COMPLETED", (final["failureReason"], final["stages"])
        # The same distillation followed, no second one started; at most one chunk asked again.
        assert final["stages"][0]["distillationId"] == did and final["stages"][0]["previousAttempts"] == []
        assert [d["distillationId"] for d in cli.json("distillations", "list")["distillations"]] == [did]
        assert len(teacher.answered) == 60 and sum(teacher.answered.values()) - 60 <= 32, teacher.answered
        registered = cli.json("distillations", "get", did)["result"]["dataset"]["hash"]
        assert cli.json("runs", "get", final["stages"][1]["runId"])["dataset"]["hash"] == registered
    finally:
        stop(svc.proc, svc.data_dir)


def test_cancel_while_the_teacher_answers_cancels_the_distillation(service, teacher):
    svc, cli = service
    teacher.hold_after = 0  # every call waits: the distillation stays in its smoke pass
    pid = start(cli, pipeline(distill_stage("distill"), train_stage("train", steps=2)))["pipelineId"]
    wait_for(lambda: get(cli, pid)["stages"][0]["distillationId"] and teacher.asked_count() > 0, 120,
             "the distillation to ask its teacher")
    did = get(cli, pid)["stages"][0]["distillationId"]
    cancelled = cli.json("pipelines", "cancel", pid, "--force")
    assert cancelled["phase"] == "CANCELLED", cancelled
    assert [s["state"] for s in cancelled["stages"]] == ["CANCELLED", "SKIPPED"], cancelled["stages"]
    teacher.release()
    assert cli.json("distillations", "wait", did, timeout=300)["phase"] == "CANCELLED"
    assert cli("datasets", "get", "distilled").returncode == 1  # nothing registered
    assert get(cli, pid)["stages"][1]["runId"] is None


@pytest.mark.parametrize("stage,field,words", [
    (distill_stage("d", teacher="nobody"), "stages[0].distillation.teacher", "nobody"),
    (distill_stage("d", **{"from": "no-such-dataset"}), "stages[0].distillation.from", "no-such-dataset"),
    (distill_stage("d", to="@d"), "stages[0].distillation.to", "not allowed here"),
    (distill_stage("d", smoke=["1"]), "stages[0].distillation.smoke[0]", "ROW:MESSAGE"),
    ({"name": "d", "type": "distill"}, "stages[0].distillation", "required"),
])
def test_a_bad_distill_stage_is_refused_naming_the_field_and_creates_nothing(service, teacher, stage, field, words):
    svc, cli = service
    before = counts(cli)
    out = cli("pipelines", "start", "-f", "-", "--force", "-o", "json", input=json.dumps(pipeline(stage)))
    assert out.returncode != 0 and field in out.stderr and words in out.stderr, out.stderr
    assert counts(cli) == before and cli.json("distillations", "list")["distillations"] == []
    assert teacher.asked_count() == 0
