"""`trainer datasets analyze` and `datasets analyses` (issue 29) through the real CLI against a real
trainerd running the real `trainer-job analyze`: the background analysis measures exactly what the
synchronous `datasets measure` answers; the same question asked again is the same analysis; the
list shows the documented columns; a trainerd killed right after an analysis started carries it
on as its second attempt; bad requests are refused by name and start nothing."""
from __future__ import annotations

import json
import os
import signal

from cli_support import DATASET_NAME, EXAMPLES, MODEL_NAME, Cli, call, start_trainerd, stop

COLUMNS = ["ANALYSIS", "BASE MODEL", "STATUS", "ROWS", "MAX TOKENS", "ATTEMPT", "STARTED"]


def analyses(cli: Cli, dataset: str = DATASET_NAME) -> list[dict]:
    return cli.json("datasets", "analyses", dataset)["analyses"]


def test_an_analysis_measures_in_the_background_what_measure_answers_at_once(ready):
    started = ready.json("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", 64)
    assert started["phase"] in ("PENDING", "RUNNING", "COMPLETED"), started
    assert started["baseModel"] == MODEL_NAME and started["maxSeqLength"] == 64
    assert started["dataset"]["hash"] == ready.json("datasets", "get", DATASET_NAME)["hash"]
    # --wait on the same question follows the same analysis to its end.
    done = ready.json("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", 64, "--wait")
    assert done["analysisId"] == started["analysisId"], done
    assert (done["phase"], done["attempt"]) == ("COMPLETED", 1), done
    assert done["startedAt"] and done["endedAt"] and "failureReason" not in done
    measured = ready.json("datasets", "measure", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", 64)
    assert done["result"] == measured
    assert measured["rows"] > 0 and measured["maxTokens"] > 0

    text = ready("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", 64, "--wait",
                 check=True).stdout
    assert "COMPLETED" in text and f"max {measured['maxTokens']}" in text, text

    # Another length is another question: a second analysis, listed first.
    other = ready.json("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "--wait")
    assert other["analysisId"] != done["analysisId"] and other["maxSeqLength"] is None
    assert [a["analysisId"] for a in analyses(ready)] == [other["analysisId"], done["analysisId"]]

    table = ready("datasets", "analyses", DATASET_NAME, check=True).stdout.splitlines()
    assert table[0].split() == [w for c in COLUMNS for w in c.split()], table[0]
    row = next(line for line in table[1:] if line.startswith(done["analysisId"][:12]))
    assert row.split()[1:6] == [MODEL_NAME, "COMPLETED", str(measured["rows"]), str(measured["maxTokens"]), "1"], row


def test_bad_analysis_requests_are_refused_by_name_and_start_nothing(ready, trainerd):
    before = len(analyses(ready))
    cases = [
        (["--max-seq-length", 64], 2, "--base-model NAME"),
        (["--base-model", MODEL_NAME, "--max-seq-length", "0"], 2, '--max-seq-length must be a positive integer, got "0"'),
        (["--base-model", MODEL_NAME, "--max-seq-length", "many"], 2, "--max-seq-length must be a positive integer"),
        (["--base-model", "no-such-model"], 1, "baseModel"),
    ]
    for flags, code, message in cases:
        out = ready("datasets", "analyze", DATASET_NAME, *flags)
        assert out.returncode == code and message in out.stderr, (flags, out.stdout + out.stderr)
    out = ready("datasets", "analyze", "no-such-dataset", "--base-model", MODEL_NAME)
    assert out.returncode == 1 and "no-such-dataset" in out.stderr, out.stderr
    out = ready("datasets", "analyses", "no-such-dataset")
    assert out.returncode == 1 and "no-such-dataset" in out.stderr, out.stderr
    # Through the API: the field at fault is named.
    url = f"{trainerd.url}/v1/datasets/{DATASET_NAME}/analyses"
    for body, field in [({"baseModel": MODEL_NAME, "maxSeqLength": 2 ** 21}, "maxSeqLength"),
                        ({"baseModel": MODEL_NAME, "maxSeqLength": "64"}, "maxSeqLength"),
                        ({"baseModel": MODEL_NAME, "maxLength": 64}, "maxLength"),
                        ({}, "baseModel")]:
        status, answer = call(url, "POST", body)
        assert status == 400 and answer["error"]["field"] == field, (body, status, answer)
    status, answer = call(f"{url}/0123456789abcdef")
    assert status == 404 and "has no analysis 0123456789abcdef" in answer["error"]["message"], answer
    assert len(analyses(ready)) == before


def test_trainerd_killed_right_after_an_analysis_started_runs_it_again_as_its_second_attempt(bin_dir, tiny_model,
                                                                                              tmp_path):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    cli = None
    service = start_trainerd(bin_dir, tmp_path / "svc", config)
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET_NAME, check=True)
    finally:
        stop(service.proc, service.data_dir)
    os.environ["TRAINER_TEST_KILL_AFTER"] = "dataset_analysis:RUNNING"
    try:
        service = start_trainerd(bin_dir, tmp_path / "svc", config)
    finally:
        del os.environ["TRAINER_TEST_KILL_AFTER"]
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        # The kill comes as the analysis starts, which may be before trainerd has answered the
        # request (the CLI then says the connection dropped, exit 6): the analysis is stored either way.
        out = cli("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "-o", "json")
        assert out.returncode in (0, 6), out.stderr
        started = json.loads(out.stdout)["analysisId"] if out.returncode == 0 else None
        service.proc.wait(timeout=120)
        assert service.proc.returncode == -signal.SIGKILL
        service = start_trainerd(bin_dir, tmp_path / "svc", config)
        cli = Cli(bin_dir / "trainer", service.url)
        done = cli.json("datasets", "analyze", DATASET_NAME, "--base-model", MODEL_NAME, "--wait")
        assert started in (None, done["analysisId"]), (started, done)
        assert (done["phase"], done["attempt"]) == ("COMPLETED", 2), done
        assert done["result"] == cli.json("datasets", "measure", DATASET_NAME, "--base-model", MODEL_NAME)
        assert [(a["analysisId"], a["attempt"]) for a in analyses(cli)] == [(done["analysisId"], 2)]
    finally:
        stop(service.proc, service.data_dir)
