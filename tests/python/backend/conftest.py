"""Fixtures of the compute backends' end-to-end tests: a tiny real base model, the real `trainer`
CLI against a real trainerd, and the real clusters the backends hand jobs to (Debian's Slurm,
a single-node Ray head from .venv-ray), each started once per test session on free ports in a
temporary folder and stopped by the process ids it started."""
from __future__ import annotations

import pathlib
import sys
import tempfile

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cli"))

from cli_support import MODEL_NAME  # noqa: E402
from clusters import RayHead, SlurmCluster  # noqa: E402
from models import make_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / MODEL_NAME, arch="qwen3",
                           tokenizer="qwen3", seed=0)


@pytest.fixture(scope="session")
def slurm(tmp_path_factory):
    cluster = SlurmCluster.start(tmp_path_factory.mktemp("slurm"))
    yield cluster
    cluster.stop()


@pytest.fixture(scope="session")
def ray_head(repo, tmp_path_factory):
    # A short folder of its own: Ray's socket paths must fit in 107 bytes.
    head = RayHead.start(repo, pathlib.Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp")))
    yield head
    head.stop()
