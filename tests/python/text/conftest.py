"""Fixtures of the text/data parity suite: the text_probe process and the npm tokenizers."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(REPO / "tests" / "python"))

from models import tokenizer_dir  # noqa: E402

TOKENIZERS = ("qwen3", "llama3")


class Probe:
    """A running text_probe (tests/unit/engine/text/text_probe.cpp): one JSON request per line."""

    def __init__(self, path: pathlib.Path):
        self.proc = subprocess.Popen([str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, encoding="utf-8", bufsize=1)

    def ask(self, **request) -> dict:
        self.proc.stdin.write(json.dumps(request, ensure_ascii=False) + "\n")
        self.proc.stdin.flush()
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"text_probe exited with {self.proc.wait()}")
        return json.loads(line)

    def ok(self, **request) -> dict:
        answer = self.ask(**request)
        assert "error" not in answer, answer["error"]
        return answer

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


@pytest.fixture(scope="session")
def probe():
    path = BUILD / "tests" / "unit" / "engine" / "text" / "text_probe"
    if not path.exists():
        pytest.fail(f"{path} not built: run tools/setup (or cmake --build {BUILD} --target text_probe)")
    p = Probe(path)
    yield p
    p.close()


@pytest.fixture(scope="session", params=TOKENIZERS)
def tokenizer_name(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def hf_tokenizers():
    """transformers' AutoTokenizer for each npm tokenizer folder."""
    from transformers import AutoTokenizer

    return {name: AutoTokenizer.from_pretrained(str(tokenizer_dir(name))) for name in TOKENIZERS}


@pytest.fixture(scope="session")
def raw_tokenizers():
    """The `tokenizers` library's Tokenizer for each tokenizer.json."""
    from tokenizers import Tokenizer

    return {name: Tokenizer.from_file(str(tokenizer_dir(name) / "tokenizer.json")) for name in TOKENIZERS}
