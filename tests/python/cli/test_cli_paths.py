"""Host paths that plans and requests name (issue 32, docs/security.md "Paths"), through the CLI
against a real trainerd whose `paths.allow` is one folder: a `rule:` or `bundle:/ABS` term, an
http term's `caFile` and an adapter import's `servingModel.ref` outside it are refused at
submission naming the field, with the same message whether the file exists or not (/etc/passwd
and a missing file; a file of another folder), through a link leading out of the allowed folder,
through `..`, and into trainerd's own data folder (its store, another run's folder). Nothing is
created. A rule inside the allowed folder still trains a run to its end."""
from __future__ import annotations

import json
import re

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)

RULE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info):
    return {"score": 1.0 if '"billing"' in solution_str else 0.0}
'''
OUTSIDE = "is outside the folders this trainerd lets requests name"


@pytest.fixture(scope="module")
def allowed(tmp_path_factory):
    return tmp_path_factory.mktemp("allowed")


@pytest.fixture(scope="module")
def service(bin_dir, tmp_path_factory, allowed):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                        config={"paths": {"allow": [str(allowed)]}}, reward_python=True) as (daemon, cli):
        yield daemon, cli


def refusal(cli, term: str) -> str:
    """The dry run's refusal of a plan with the one reward term `term`; asserts it was refused."""
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan(term))
    assert out.returncode != 0, out.stdout
    return out.stderr


def unnamed(message: str, path) -> str:
    return message.replace(str(path), "PATH")


def test_the_allowed_folders_are_the_operators(service, allowed):
    _, cli = service
    info = cli.json("info")
    assert info["configuration"]["paths"]["allow"] == [str(allowed)], info["configuration"]


def test_a_rule_outside_answers_the_same_whether_it_exists_or_not(service, tmp_path):
    _, cli = service
    before = cli.json("runs", "list")["runs"]
    elsewhere = tmp_path / "score.py"  # exists, but in a folder the operator did not allow
    elsewhere.write_text(RULE)
    answers = {}
    for path in ("/etc/passwd", "/etc/no-such-file.py", elsewhere, tmp_path / "missing.py"):
        message = refusal(cli, f"{{kind: 'rule:{path}'}}")
        assert "config.reward.terms[0].kind" in message and OUTSIDE in message, message
        assert "no such" not in message, message
        answers[str(path)] = unnamed(message, path)
    assert len(set(answers.values())) == 1, answers
    assert cli.json("runs", "list")["runs"] == before


def test_a_plans_grader_outside_is_refused(service):
    _, cli = service
    text = plan("{kind: json-label-match}") + "grader: 'rule:/etc/passwd'\n"
    out = cli("runs", "start", "-f", "-", "--dry-run", input=text)
    assert out.returncode != 0 and "grader" in out.stderr and OUTSIDE in out.stderr, out.stderr


def test_a_link_or_dotdot_leading_out_of_the_allowed_folder_is_refused(service, allowed):
    _, cli = service
    (allowed / "etc").symlink_to("/etc")
    for path in (allowed / "etc" / "passwd", f"{allowed}/../../../etc/passwd", f"{allowed}/nothing/../../x.py"):
        message = refusal(cli, f"{{kind: 'rule:{path}'}}")
        assert "config.reward.terms[0].kind" in message and OUTSIDE in message, message
    # A bundle folder too.
    message = refusal(cli, f"{{kind: 'bundle:{allowed}/etc#scoring'}}")
    assert "config.reward.terms[0].kind" in message and OUTSIDE in message, message


def test_trainerds_data_folder_is_never_reached(service, allowed):
    daemon, cli = service
    (allowed / "data").symlink_to(daemon.data_dir)
    message = refusal(cli, f"{{kind: 'rule:{allowed}/data/state.db'}}")
    assert "config.reward.terms[0].kind" in message and OUTSIDE in message, message
    # Another run's folder, as an adapter to import: refused before anything is read or stored.
    run_folder = daemon.data_dir / "runs" / "another-run"
    run_folder.mkdir(parents=True, exist_ok=True)
    before = cli.json("trained-models", "list")
    for ref in (run_folder, allowed / "data" / "runs" / "another-run", "/etc"):
        doc = {"servingModel": {"variant": "ADAPTER", "baseModel": MODEL, "ref": str(ref)}, "workload": WORKLOAD}
        out = cli("trained-models", "register", "-f", "-", input=json.dumps(doc))
        assert out.returncode != 0, out.stdout
        assert "servingModel.ref" in out.stderr and OUTSIDE in out.stderr, out.stderr
    assert cli.json("trained-models", "list") == before


def test_a_ca_file_outside_is_refused_alike_existing_or_not(service):
    _, cli = service
    answers = set()
    for path in ("/etc/hostname", "/etc/no-such-ca.pem"):
        message = refusal(cli, f"{{kind: 'http:http://127.0.0.1:9/evaluate', caFile: '{path}'}}")
        assert "config.reward.terms[0].caFile" in message and OUTSIDE in message, message
        answers.add(unnamed(message, path))
    assert len(answers) == 1, answers


def test_a_missing_rule_inside_the_allowed_folder_is_named_missing(service, allowed):
    _, cli = service
    message = refusal(cli, f"{{kind: 'rule:{allowed}/absent.py'}}")
    assert "config.reward.terms[0].kind" in message and "no such file" in message, message


def test_a_rule_inside_the_allowed_folder_trains_a_run_to_its_end(service, allowed, tmp_path):
    _, cli = service
    rule = allowed / "score.py"
    rule.write_text(RULE)
    run, steps = run_to_end(cli, plan(f"{{kind: 'rule:{rule}'}}"), tmp_path)
    assert re.fullmatch(r"[0-9a-f]+", run["runId"]) and steps and steps[0]["rl"]["terms"][0]["name"] == "rule:score.py"
