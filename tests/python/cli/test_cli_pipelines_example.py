"""The documentation's pipeline (issue 26, docs/pipelines.md) through the real CLI: a judge trained,
gated on its own score, then `model:@judge` grading an SFT run (its grader) and an RL run (its
reward term, the judge served at an endpoint of trainerd's own)."""
from __future__ import annotations

import json

import pytest
import yaml

from graders_support import DATASET, MODEL, WORKLOAD, plan
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    # Two CPU devices: one for the judge's endpoint, one for the stage's job.
    config = {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 2, "maxClaim": 1}]}
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                        config=config) as (_, cli):
        yield cli


def test_a_judge_gated_on_its_own_score_grades_an_sft_run_and_an_rl_run(cli):
    judge = {"name": "judge", "type": "train", "workload": WORKLOAD, "baseModel": MODEL,
             "config": {"dataset": DATASET, "maxSeqLength": 64, "model": {"precision": "FP32"},
                        "hyperparams": {"lora": {"rank": 8, "alpha": 16},
                                        "training": {"maxSteps": 2, "batchSize": 4}}},
             "execution": {"gpus": 0}}
    rl = yaml.safe_load(plan("{kind: 'model:@judge', maxConsecutiveFailures: 1000000, timeoutSeconds: 60}", steps=1))
    del rl["kind"]
    stages = [judge,
              {"name": "judge-eval", "type": "evaluate", "model": "@judge", "dataset": DATASET, "maxNewTokens": 4,
               "gate": {"minMeanScore": 0.0}},
              {**judge, "name": "sft", "grader": "model:@judge"},
              {"name": "rl", "type": "train", **rl}]
    out = cli("pipelines", "start", "-f", "-", "--force", "--wait", "--exit-status", "-o", "json", "-q",
              input=json.dumps({"kind": "pipeline", "stages": stages}), timeout=1100)
    p = json.loads(out.stdout)
    assert out.returncode == 0 and p["phase"] == "COMPLETED", (out.stderr, p.get("failureReason"), p.get("stages"))
    judge_model = p["stages"][0]["output"]["modelId"]
    assert p["stages"][1]["gate"]["passed"] is True
    sft = cli.json("runs", "get", p["stages"][2]["runId"])
    assert sft["grader"] == f"model:{judge_model}" and sft["pipeline"]["stage"] == "sft", sft
    rl_run = cli.json("runs", "get", p["stages"][3]["runId"])
    assert rl_run["plan"]["config"]["reward"]["terms"][0]["kind"] == f"model:{judge_model}", rl_run["plan"]
    assert judge_model in rl_run["judgeEndpoints"], rl_run.get("judgeEndpoints")
