"""A reward term's declared network access (issue 32, docs/security.md "User code"), through
`trainer runs start` against a real trainerd, a real job and its confined reward worker: a rule:
scoring function that calls an evaluator on loopback (graders_support.py's real HTTP server).

- without a declaration the worker has no network: the call fails inside the confinement and
  nothing reaches the server;
- with `network: {allow: ["127.0.0.1:PORT"]}`, which the operator's outbound.allow lets through,
  the call reaches the server and the reward records its answer;
- a declaration outbound.allow does not let through is refused at submission, naming the term,
  its field and the entry; nothing is started;
- the declaration is in the resolved plan (`--dry-run --show-resolved`).
"""
from __future__ import annotations

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)

UNREACHED = 0.25  # the scorer's reward when its call fails

SCORER = '''
import json, urllib.request

def compute_score(data_source, solution_str, ground_truth, extra_info):
    request = urllib.request.Request(URL, data=json.dumps({"output": "billing"}).encode(),
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return float(json.load(answer)["score"])  # the evaluator's 1 for "billing"
    except OSError:
        return UNREACHED
'''


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory, evaluator):
    port = evaluator.url.rsplit(":", 1)[1]
    config = {"outbound": {"allow": [f"127.0.0.1:{port}"]}}  # the evaluator's port, nothing else
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, config=config,
                        reward_python=True) as (_, cli):
        yield cli


@pytest.fixture
def scorer(tmp_path, evaluator):
    module = tmp_path / "calls_out.py"
    module.write_text(SCORER.replace("URL", repr(f"{evaluator.url}/eval-good/evaluate"))
                      .replace("UNREACHED", repr(UNREACHED)))
    return module


def rewards_of(steps):
    return [r for s in steps for r in s["rl"]["rewards"]]


def test_without_a_declaration_the_scoring_code_has_no_network(cli, evaluator, scorer, tmp_path):
    before = len(evaluator.requests["eval-good"])
    _, steps = run_to_end(cli, plan(f"{{kind: 'rule:{scorer}'}}"), tmp_path)
    rewards = rewards_of(steps)
    assert rewards and rewards == [UNREACHED] * len(rewards), rewards
    assert len(evaluator.requests["eval-good"]) == before  # nothing reached the server


def test_a_declared_and_allowed_host_is_reached_and_the_reward_records_the_answer(cli, evaluator, scorer, tmp_path):
    port = evaluator.url.rsplit(":", 1)[1]
    term = f"{{kind: 'rule:{scorer}', network: {{allow: ['127.0.0.1:{port}']}}}}"
    resolved = cli.json("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=plan(term))["plan"]
    assert resolved["config"]["reward"]["terms"][0]["network"] == {"allow": [f"127.0.0.1:{port}"]}, resolved

    before = len(evaluator.requests["eval-good"])
    _, steps = run_to_end(cli, plan(term), tmp_path)
    rewards = rewards_of(steps)
    assert rewards and rewards == [1.0] * len(rewards), rewards
    assert len(evaluator.requests["eval-good"]) - before == len(rewards)


@pytest.mark.parametrize("entry,words", [
    ("127.0.0.1:{other}", "127.0.0.1 is a loopback address"),
    ("169.254.169.254:80", "the cloud metadata service"),
    ("api.example.com:443", "outbound.allow"),
    ("no-port", "must be \"HOST:PORT\""),
])
def test_a_declaration_the_operator_does_not_allow_is_refused_at_submission(cli, evaluator, scorer, entry, words):
    other = int(evaluator.url.rsplit(":", 1)[1]) + 1
    entry = entry.format(other=other)
    before = cli.json("runs", "list")["runs"]
    term = f"{{kind: 'rule:{scorer}', name: net-term, network: {{allow: ['{entry}']}}}}"
    out = cli("runs", "start", "-f", "-", "--force", input=plan(term))
    assert out.returncode != 0, out.stdout
    assert "config.reward.terms[0].network.allow[0]" in out.stderr, out.stderr
    assert words in out.stderr, out.stderr
    if entry != "no-port":
        assert "term 'net-term' declares network access that trainerd does not allow" in out.stderr, out.stderr
        assert f"'{entry}'" in out.stderr, out.stderr
    assert cli.json("runs", "list")["runs"] == before


def test_only_rule_and_bundle_terms_declare_network(cli, evaluator):
    term = f"{{kind: 'http:{evaluator.url}/eval-good/evaluate', network: {{allow: ['127.0.0.1:1']}}}}"
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan(term))
    assert out.returncode != 0, out.stdout
    assert "config.reward.terms[0].network" in out.stderr and "applies to rule and bundle" in out.stderr, out.stderr
