"""Judges and http: evaluators over HTTPS, through `trainer runs start` against a real trainerd:
a real local HTTPS server (graders_support.py behind Python's ssl) with a self-signed certificate
made here by the openssl CLI. Trusted through a caFile (the judge's declaration, the http: term's
field), verdicts arrive; without it the TLS failure is reported naming the URL: an http: term's
calls are unreachable until the job stops, and a judge's readiness probe fails the run in
WAITING_FOR_GRADER."""
from __future__ import annotations

import shutil
import ssl
import subprocess

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, GraderServer, phases, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)  # its RL runs are waited for up to 900 s each (graders_support.run_to_end)


def self_signed(folder) -> tuple[str, str]:
    """A certificate for 127.0.0.1 signed by itself, and its key (PEM files)."""
    openssl = shutil.which("openssl")
    assert openssl, "the openssl CLI is required (Debian package openssl, installed by tools/setup)"
    cert, key = folder / "cert.pem", folder / "key.pem"
    subprocess.run([openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    return str(cert), str(key)


@pytest.fixture(scope="module")
def tls(tmp_path_factory):
    cert, key = self_signed(tmp_path_factory.mktemp("tls"))
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server = GraderServer(context)
    server.cert = cert
    yield server
    server.close()


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory, tls):
    config = {"judges": [{"name": "good", "url": f"{tls.url}/good", "caFile": tls.cert, "readyTimeoutSeconds": 60},
                         {"name": "untrusted", "url": f"{tls.url}/untrusted", "readyTimeoutSeconds": 60}]}
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, config=config,
                        reward_python=True) as (_, cli):
        yield cli


def test_an_https_judge_trusted_through_its_ca_file_scores(cli, tls, tmp_path):
    run, steps = run_to_end(cli, plan("{kind: 'model:good'}"), tmp_path)
    assert len(tls.requests["good"]) == 2 * 2 * 2  # steps x prompts x group
    assert tls.probes["good"] >= 1
    for s in steps:
        assert s["rl"]["terms"][0]["failures"] == 0
        assert all(r in (1.0, 0.25) for r in s["rl"]["rewards"]), s["rl"]["rewards"]


def test_an_https_evaluator_trusted_through_the_terms_ca_file_scores(cli, tls, tmp_path):
    term = f"{{kind: 'http:{tls.url}/eval-good/evaluate', caFile: '{tls.cert}'}}"
    run, steps = run_to_end(cli, plan(term), tmp_path)
    calls = tls.requests["eval-good"]
    assert len(calls) == 8 and all(set(c) == {"input", "output", "expected"} for c in calls)
    assert sum(s["rl"]["terms"][0]["failures"] for s in steps) == 0
    assert all(r in (1.0, 0.5) for s in steps for r in s["rl"]["rewards"])


def test_an_https_evaluator_without_its_ca_is_unreachable_naming_the_url(cli, tls, tmp_path):
    url = f"{tls.url}/eval-untrusted/evaluate"
    term = f"{{kind: 'http:{url}', retries: 0, maxConsecutiveFailures: 2}}"
    run, _ = run_to_end(cli, plan(term), tmp_path, expect="FAILED")
    reason = run["failureReason"]
    assert "reward term config.reward.terms[0] (http:" + url + ") produced no score in 2 calls in a row" in reason, reason
    assert "unreachable: TLS failure with " + url in reason, reason
    assert "trusted: the system's CA store" in reason, reason
    assert tls.requests["eval-untrusted"] == []  # no request got past the handshake


def test_an_https_judge_without_its_ca_fails_the_run_while_waiting_for_it(cli, tls, tmp_path):
    run, steps = run_to_end(cli, plan("{kind: 'model:untrusted'}"), tmp_path, expect="FAILED")
    assert phases(run)[-2:] == ["WAITING_FOR_GRADER", "FAILED"], phases(run)
    reason = run["failureReason"]
    assert f"judge 'untrusted' at {tls.url}/untrusted failed TLS verification: TLS failure with " in reason, reason
    assert "declare the judge's caFile" in reason, reason
    assert steps == [] and tls.requests["untrusted"] == []


def test_a_missing_ca_file_is_refused_at_submission_by_name(cli, tls, tmp_path):
    missing = tmp_path / "no-such-ca.pem"  # within the folders trainerd lets plans name (its tmp folder)
    term = f"{{kind: 'http:{tls.url}/eval-good/evaluate', caFile: '{missing}'}}"
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan(term))
    assert out.returncode != 0
    assert "config.reward.terms[0].caFile" in out.stderr and f"'{missing}': no such file" in out.stderr, out.stderr
