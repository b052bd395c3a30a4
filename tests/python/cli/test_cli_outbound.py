"""Outbound calls that plans name (issue 32, docs/security.md "Outbound calls"), through `trainer
runs start` against a real trainerd and a real http: evaluator on loopback (graders_support.py):
with `outbound.allow: ["*:*"]` a term at a loopback, link-local (metadata) or private address is
refused at submission naming the term's field and the kind of address, and nothing is called; a
name allowed when it was checked that resolves to loopback when the job calls it (DNS rebinding)
fails the run at connection time, naming the address, with no request reaching the evaluator.
The name's answers come from the test hosts file TRAINER_TEST_HOSTS_FILE: a fake, named as such
(no DNS server can be made to rebind for one process here); the refusals are the real code's."""
from __future__ import annotations

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, plan
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory, evaluator, hosts):
    hosts.write_text("")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINER_TEST_HOSTS_FILE", str(hosts))  # trainerd's environment reaches its jobs
        with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                            config={"outbound": {"allow": ["*:*"]}}) as (_, cli):
            yield cli


@pytest.mark.parametrize("url,words", [
    ("http://127.0.0.1:{port}/eval-good/evaluate", "a loopback address"),
    ("http://localhost:{port}/eval-good/evaluate", "a loopback address"),
    ("http://169.254.169.254/latest/meta-data", "the cloud metadata service"),
    ("http://10.0.0.7:8080/evaluate", "a private address"),
])
def test_a_term_at_an_internal_address_is_refused_at_submission(cli, evaluator, url, words):
    port = evaluator.url.rsplit(":", 1)[1]
    before = cli.json("runs", "list")["runs"]
    out = cli("runs", "start", "-f", "-", "--force", input=plan(f"{{kind: 'http:{url.format(port=port)}'}}"))
    assert out.returncode != 0, out.stdout
    assert "config.reward.terms[0].kind" in out.stderr and words in out.stderr, out.stderr
    assert "outbound.allow" in out.stderr, out.stderr
    assert evaluator.requests["eval-good"] == []
    assert cli.json("runs", "list")["runs"] == before


def test_a_name_that_rebinds_to_loopback_after_the_check_is_refused_when_the_job_connects(cli, evaluator, hosts,
                                                                                          tmp_path):
    port = evaluator.url.rsplit(":", 1)[1]
    url = f"http://rebind.test:{port}/eval-good/evaluate"
    hosts.write_text("rebind.test 203.0.113.7\n")  # a public (documentation) address when trainerd checks it
    dry = cli("runs", "start", "-f", "-", "--dry-run", input=plan(f"{{kind: 'http:{url}'}}"))
    assert dry.returncode == 0, dry.stderr

    f = tmp_path / "plan.yaml"
    f.write_text(plan(f"{{kind: 'http:{url}'}}"))
    run_id = cli.json("runs", "start", "-f", f, "--force")["runId"]
    hosts.write_text("rebind.test 127.0.0.1\n")  # loopback when the job calls it (after its first rollouts)
    cli("runs", "wait", run_id, "--timeout", "15m", timeout=1000)
    run = cli.json("runs", "get", run_id)
    assert run["phase"] == "FAILED", run
    reason = run["failureReason"]
    assert "rebind.test" in reason and "127.0.0.1 is a loopback address" in reason, reason
    assert evaluator.requests["eval-good"] == []  # nothing reached the evaluator
