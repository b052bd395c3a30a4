"""What the curation tests share (test_cli_curations.py, test_cli_pipelines_curate.py): a real
OpenAI-compatible HTTP judge written for the tests (fake_chat_server.py), with deterministic scores and a count of its
verdicts per answer, and session files of canonical captured calls."""
from __future__ import annotations

import json
import re

import pytest

from fake_chat_server import FakeChatServer, completion

THRESHOLD = 0.5


def score_of(answer: str) -> float:
    """The judge's deterministic verdict for an answer: its number's digits spread over [0, 1)."""
    n = int(re.search(r"answer (\d+)", answer).group(1))
    return (n * 37 % 100) / 100


class Judge(FakeChatServer):
    """An OpenAI-compatible judge: scores each answer with score_of(); the paths under /refuse/ are
    a judge that refuses every call (a bad key, say). Holds and restarts as FakeChatServer does."""

    def __init__(self):
        self.verdicts: dict[str, int] = {}  # answer -> verdicts given
        super().__init__()

    def refusal(self, path: str):
        return (401, {"error": "bad key"}) if path.startswith("/refuse/") else None

    def key_of(self, body: dict):
        return body["messages"][1]["content"].split("The assistant's answer:\n", 1)[1]

    def reply(self, body: dict, answer) -> dict:
        with self.lock:
            self.verdicts[answer] = self.verdicts.get(answer, 0) + 1
        return completion(body["model"], {"role": "assistant", "content": json.dumps({"score": score_of(answer)})},
                          usage=True)


@pytest.fixture
def judge():
    j = Judge()
    yield j
    j.close()


def config(judge: Judge) -> dict:
    return {"judges": [{"name": "test-judge", "url": judge.url, "model": "judge-model"},
                       {"name": "refusing-judge", "url": judge.url + "/refuse"}]}


def canonical(tmp_path, name: str, numbers) -> tuple[str, list[str]]:
    path = tmp_path / name
    answers = [f"answer {n}" for n in numbers]
    path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"question {a}"},
                                                     {"role": "assistant", "content": a}]}) + "\n"
                            for a in answers))
    return str(path), answers
