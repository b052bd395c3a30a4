"""Fixtures of the chaos tests: the CLI tests' helpers (tests/python/cli) and the tiny real base
model they train."""
from __future__ import annotations

import pathlib
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "cli"))

from cli_support import MODEL_NAME  # noqa: E402
from models import make_tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def tiny_model(tmp_path_factory) -> pathlib.Path:
    return make_tiny_model(tmp_path_factory.mktemp("models") / MODEL_NAME, arch="qwen3", tokenizer="qwen3", seed=0)
