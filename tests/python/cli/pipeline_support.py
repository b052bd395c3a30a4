"""What the pipeline tests share (test_cli_pipelines.py, test_cli_pipelines_curate.py): stages and
plans, starting and reading a pipeline through the CLI, and counting what exists."""
from __future__ import annotations

import json

from cli_support import DATASET_NAME, EXAMPLES, MODEL_NAME, WORKLOAD, Cli

MAX_NEW = 4


def train_stage(name: str, steps: int = 3, **extra) -> dict:
    stage = {"name": name, "type": "train", "workload": WORKLOAD, "baseModel": MODEL_NAME,
             "config": {"dataset": DATASET_NAME, "maxSeqLength": 128, "model": {"precision": "FP32"},
                        "hyperparams": {"optimizer": {"learningRate": 0.003},
                                        "training": {"maxSteps": steps, "batchSize": 4}}},
             "execution": {"gpus": 0}}
    stage.update(extra)
    return stage


def evaluate_stage(name: str, model: str, **extra) -> dict:
    stage = {"name": name, "type": "evaluate", "model": model, "dataset": "held-out", "maxNewTokens": MAX_NEW}
    stage.update(extra)
    return stage


def pipeline(*stages: dict, **extra) -> dict:
    return {"kind": "pipeline", "stages": list(stages), **extra}


def start(cli: Cli, plan: dict, *flags) -> dict:
    out = cli("pipelines", "start", "-f", "-", "--force", "-o", "json", *flags, input=json.dumps(plan))
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def get(cli: Cli, pid: str) -> dict:
    return cli.json("pipelines", "get", pid)


def wait_end(cli: Cli, pid: str) -> dict:
    cli("pipelines", "wait", pid, "--timeout", "15m", "-q", timeout=1000)
    return get(cli, pid)


def counts(cli: Cli) -> tuple[int, int, int]:
    return (len(cli.json("runs", "list", "--limit", "500")["runs"]),
            len(cli.json("evaluations", "list", "--limit", "1000")["evaluations"]),
            len(cli.json("pipelines", "list")["pipelines"]))


def held_out(cli: Cli, folder) -> None:
    rows = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()[-4:]
    data = folder / "held-out.jsonl"
    data.write_text("\n".join(rows) + "\n")
    cli("datasets", "create", "-f", data, "--name", "held-out", check=True)
