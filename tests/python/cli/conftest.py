"""Fixtures of the CLI's end-to-end tests: a real trainerd on a free port with a temporary data
folder, a tiny real base model it allows, and the real `trainer` binary pointed at it."""
from __future__ import annotations

import pathlib

import pytest

from cli_support import MODEL_NAME, Cli, prepare, start_trainerd, stop
from graders_support import GraderServer
from models import make_tiny_model


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / MODEL_NAME, arch="qwen3",
                           tokenizer="qwen3", seed=0)


@pytest.fixture(scope="module")
def sharp_model(tmp_path_factory) -> pathlib.Path:
    """Weights drawn at a 0.3 scale: logits far from uniform, so greedy answers vary from row to
    row, token to token and model to model (the usual 0.02 model answers every row alike)."""
    return make_tiny_model(tmp_path_factory.mktemp("models") / MODEL_NAME, arch="qwen3", tokenizer="qwen3", seed=3,
                           initializer_range=0.3)


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def cli(bin_dir, trainerd) -> Cli:
    return Cli(bin_dir / "trainer", trainerd.url)


@pytest.fixture(scope="module")
def ready(cli):
    """The tiny model selected, the sentiment dataset registered, a workload created."""
    return prepare(cli)


@pytest.fixture(scope="module")
def evaluator():
    """A real HTTP grader (graders_support.GraderServer) for a module's runs; a module that needs
    another kind of evaluator (a held one, one that fails on cue) defines its own `evaluator`."""
    server = GraderServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def hosts(tmp_path_factory):
    """An empty hosts file for TRAINER_TEST_HOSTS_FILE (the outbound tests write names into it)."""
    return tmp_path_factory.mktemp("hosts") / "hosts"
