"""Fixtures of the service tests: a real trainerd on a free loopback port with a temp data dir.

Every trainerd a test starts is stopped at teardown (SIGKILL when it will not stop), and so is
every job process it started: they are found by their command lines naming the temp data dir.
"""
from __future__ import annotations

import json
import os
import pathlib
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # tests/python: models.py
sys.path.insert(0, str(HERE))

from service_helpers import CHAT_ROWS, STANDIN_JOB, BUILD, Trainerd, jsonl, kill_jobs_under  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    from models import make_tiny_model
    return pathlib.Path(make_tiny_model(tmp_path_factory.mktemp("models") / "tiny-qwen3", arch="qwen3",
                                        tokenizer="qwen3", seed=0))


@pytest.fixture(scope="session")
def slow_model(tmp_path_factory, tiny_model) -> pathlib.Path:
    """The tiny model plus a large extra file, so that preparing it into the cache takes a while."""
    import shutil
    path = tmp_path_factory.mktemp("models") / "tiny-qwen3-large"
    shutil.copytree(tiny_model, path)
    with open(path / "padding.bin", "wb") as f:
        block = os.urandom(1 << 20)
        for _ in range(384):
            f.write(block)
    return path


@pytest.fixture
def standin_behaviour(tmp_path):
    """Writes the stand-in job's behaviour file; returns a setter."""
    path = tmp_path / "standin.json"
    path.write_text("{}")

    def set_behaviour(**behaviour):
        path.write_text(json.dumps(behaviour))
    set_behaviour.path = path
    return set_behaviour


@pytest.fixture
def start_trainerd(tmp_path, tiny_model, standin_behaviour):
    """start_trainerd(pools=..., quotas=..., job=..., extra_models=...) -> a ready Trainerd."""
    started: list[Trainerd] = []

    def start(pools=None, quotas=None, job: str = "standin", grace: int = 2, base_models=None,
              data_dir: pathlib.Path | None = None, telemetry=None, limits=None) -> Trainerd:
        config = {
            "baseModels": base_models or [{"name": "tiny/qwen3", "path": str(tiny_model)}],
            "pools": pools or [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
            "limits": {"cancelGraceSeconds": grace, "maxRequestBytes": 65536, "maxDatasetBytes": 1 << 20},
        }
        config["limits"].update(limits or {})
        if quotas:
            config["quotas"] = quotas
        if telemetry:
            config["telemetry"] = telemetry
        jobs = {"standin": str(STANDIN_JOB), "real": str(BUILD / "apps" / "trainer-job")}
        config["jobBinary"] = jobs.get(job, job)
        d = Trainerd(data_dir or tmp_path / f"data{len(started)}", config,
                     env={"TRAINER_STANDIN_FILE": str(standin_behaviour.path)})
        started.append(d)
        return d.start()

    yield start
    for d in started:
        d.kill()
        kill_jobs_under(d.data_dir)


@pytest.fixture
def setup_basics():
    """setup_basics(d) selects the tiny model, creates workload `triage`, registers dataset `train`."""
    def setup(d: Trainerd, workload="triage", quota=None):
        d.select_ready("tiny/qwen3")
        body = {"name": workload}
        if quota is not None:
            body["gpuQuota"] = quota
        w = d.ok(d.post("/v1/workloads", body), 201)
        ds = d.ok(d.post("/v1/datasets", {"name": "train", "rows": jsonl(CHAT_ROWS)}), 200, 201)
        return w, ds
    return setup


