"""TLS on trainerd's API (docs/security.md, "TLS"), through the real `trainer` and real HTTPS:

- a throwaway CA and a server certificate for 127.0.0.1 made here with the `openssl` tool;
- `trainer --ca-file ca.pem` (and TRAINER_CA_FILE) talks to a trainerd serving that certificate;
  without it, or with another CA, the CLI fails naming the address and that the certificate did
  not verify, with the exit code of an unreachable service;
- plain HTTP to the TLS port gets no answer;
- a run submitted over TLS runs its real job to COMPLETED: the job reports back and commits its
  snapshots over HTTPS, verified with the CA trainerd hands it; `runs wait` (parked long polls)
  and the run's event stream (a chunked SSE answer) work over TLS;
- the hostile-client bounds hold over TLS: a client that opens a connection and never finishes its
  handshake, or its request head, is closed;
- `trainerd --host 0.0.0.0` without TLS refuses, naming the TLS settings; with them it starts;
- a bad certificate or key is refused at start, naming the setting and the file;
- `trainer login --ca-file` keeps the CA file beside the token (mode 0600, an old file still read),
  later commands verify with it when they name none, `trainer logout` forgets both;
- an upload over the service's limit is refused before it is sent over https://, with the
  message it gets over http://.
"""
from __future__ import annotations

import json
import os
import pathlib
import socket
import ssl
import subprocess
import urllib.error
import urllib.request

import pytest

from auth import address_key, token_for
from cli_support import EXAMPLES, MODEL_NAME, Cli, plan_text, prepare, run_snapshots, start_run, start_trainerd, stop

UNREACHABLE = 6  # cli/exit_codes.h: kExitUnreachable
DATASET_LIMIT = 2 << 20  # the TLS trainerd's limits.maxDatasetBytes


def openssl(*args: str, cwd: pathlib.Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


def make_ca(folder: pathlib.Path, name: str) -> pathlib.Path:
    """A self-signed CA (NAME.pem, NAME.key) in `folder`."""
    openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.pem", "-days", "2", "-subj", f"/CN={name}",
            "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign",
            cwd=folder)
    return folder / f"{name}.pem"


def make_server_cert(folder: pathlib.Path, ca: str, name: str) -> tuple[pathlib.Path, pathlib.Path]:
    """A certificate for 127.0.0.1 and localhost signed by CA `ca`: (NAME.pem, NAME.key)."""
    openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", "/CN=127.0.0.1", cwd=folder)
    (folder / f"{name}.ext").write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                        "extendedKeyUsage=serverAuth\n")
    openssl("x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem", "-CAkey", f"{ca}.key", "-CAcreateserial",
            "-out", f"{name}.pem", "-days", "2", "-extfile", f"{name}.ext", cwd=folder)
    return folder / f"{name}.pem", folder / f"{name}.key"


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("pki")
    ca = make_ca(folder, "ca")
    cert, key = make_server_cert(folder, "ca", "server")
    other_ca = make_ca(folder, "other-ca")
    other_cert, other_key = make_server_cert(folder, "other-ca", "other")
    return {"dir": folder, "ca": ca, "cert": cert, "key": key, "other_ca": other_ca,
            "other_cert": other_cert, "other_key": other_key}


@pytest.fixture(scope="module")
def tls_trainerd(bin_dir, tiny_model, tmp_path_factory, pki):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("tls-trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                              "tls": {"certFile": str(pki["cert"]), "keyFile": str(pki["key"]),
                                      "caFile": str(pki["ca"])},
                              "limits": {"maxDatasetBytes": DATASET_LIMIT}},
                             args=("--header-timeout", "2"), ca_file=pki["ca"])
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def tls_cli(bin_dir, tls_trainerd, pki) -> Cli:
    cli = Cli(bin_dir / "trainer", tls_trainerd.url)
    return cli


def https_get(url: str, ca: pathlib.Path, timeout: float = 60) -> tuple[int, str, bytes]:
    """(status, content type, body) of a GET sending the token kept for the address, verified with `ca`."""
    opener = urllib.request.build_opener(urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(ca))))
    req = urllib.request.Request(url, headers={"Authorization": f"Bearer {token_for(url)}"})
    try:
        with opener.open(req, timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type", ""), r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type", ""), e.read()


def test_the_cli_verifies_trainerds_certificate_with_the_ca_file(tls_cli, tls_trainerd, pki):
    url = tls_trainerd.url
    assert url.startswith("https://127.0.0.1:")
    info = tls_cli.json("--ca-file", pki["ca"], "info")
    assert info["build"]["version"] and info["startup"]["ready"], info
    assert tls_cli.json("--ca-file", pki["ca"], "runs", "list")["runs"] == []
    # TRAINER_CA_FILE does the same.
    listed = tls_cli("runs", "list", "-o", "json", env={"TRAINER_CA_FILE": str(pki["ca"])})
    assert listed.returncode == 0, listed.stderr
    assert json.loads(listed.stdout)["runs"] == []

    # Without a CA file the system's store does not know our CA.
    out = tls_cli("runs", "list", env={"TRAINER_CA_FILE": ""})
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert f"the trainer service at {url} answered, but its TLS certificate did not verify against " \
           "the system's CA store" in out.stderr, out.stderr
    assert "--ca-file" in out.stderr
    # Another CA: refused, naming the file.
    out = tls_cli("--ca-file", pki["other_ca"], "runs", "list")
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert f"did not verify against the CA file {pki['other_ca']} (--ca-file)" in out.stderr, out.stderr
    # A CA file that is not one.
    out = tls_cli("--ca-file", pki["dir"] / "nothing.pem", "runs", "list")
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert f"cannot load the CA file {pki['dir'] / 'nothing.pem'} (--ca-file)" in out.stderr, out.stderr


def test_plain_http_to_the_tls_port_gets_no_answer(tls_cli, tls_trainerd, pki):
    port = int(tls_trainerd.url.rsplit(":", 1)[1])
    # The CLI told http://: it says the handshake is missing rather than printing garbage.
    out = tls_cli("--trainer-url", f"http://127.0.0.1:{port}", "runs", "list")
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert "cannot reach the trainer service" in out.stderr, out.stderr
    # A raw HTTP/1.1 request: the server closes without an HTTP answer.
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(b"GET /v1/info HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        received = b""
        while chunk := s.recv(4096):
            received += chunk
    assert not received.startswith(b"HTTP/"), received[:100]


def test_a_run_over_tls_completes_and_its_job_reports_over_https(tls_cli, tls_trainerd, pki, monkeypatch):
    # Every `trainer` below verifies with the CA of the environment (prepare() passes no flags).
    monkeypatch.setenv("TRAINER_CA_FILE", str(pki["ca"]))
    cli = prepare(tls_cli)
    run = start_run(cli, plan_text(max_steps=3, save_every=1), "--wait")  # runs wait: parked long polls
    assert run["phase"] == "COMPLETED", run
    # The job committed its snapshots through the catalog at https://, verified with the CA
    # trainerd handed it (TRAINER_CATALOG_CA_FILE).
    steps = sorted(s["savedStep"] for s in run_snapshots(cli, run["runId"]))
    assert steps and steps[-1] == 3, steps
    # The run's live stream (a chunked SSE answer) over TLS: every step, then its end.
    status, content_type, body = https_get(f"{tls_trainerd.url}/v1/runs/{run['runId']}/metrics/stream", pki["ca"])
    assert status == 200 and content_type.startswith("text/event-stream"), (status, body[:300])
    text = body.decode()
    assert "event: points" in text and "event: end" in text and "COMPLETED" in text, text[-500:]
    # The job's own posts (events, log lines, metrics) went through: nothing in its log says otherwise.
    job_log = (tls_trainerd.data_dir / "runs" / run["runId"] / "attempt-1" / "job.log").read_text(errors="replace")
    assert "cannot post to" not in job_log and "OTLP push" not in job_log, job_log[-2000:]


def test_a_client_that_stalls_its_handshake_or_its_head_is_closed(tls_trainerd, pki):
    port = int(tls_trainerd.url.rsplit(":", 1)[1])
    # No handshake at all: closed (the header deadline is 2 s here).
    with socket.create_connection(("127.0.0.1", port), timeout=60) as s:
        assert s.recv(1) == b""
    # A handshake, then half a request head: closed, without an answer.
    context = ssl.create_default_context(cafile=str(pki["ca"]))
    with socket.create_connection(("127.0.0.1", port), timeout=60) as raw:
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            s.sendall(b"GET /v1/info HTTP/1.1\r\nHost: x\r\n")
            try:
                got = s.recv(1)
            except (ssl.SSLError, ConnectionResetError):
                got = b""
            assert got == b""
    # The service still answers.
    status, _, body = https_get(f"{tls_trainerd.url}/v1/info", pki["ca"])
    assert status == 200, body


def run_trainerd(bin_dir, tmp: pathlib.Path, *args: str, config: dict | None = None) -> subprocess.CompletedProcess:
    """trainerd with `args` (and `config`) that is expected to refuse to start."""
    extra = []
    if config is not None:
        (tmp / "config.json").write_text(json.dumps(config))
        extra = ["--config", str(tmp / "config.json")]
    return subprocess.run([str(bin_dir / "trainerd"), "--port", "0", "--data-dir", str(tmp / "data"), *extra, *args],
                          capture_output=True, text=True, timeout=60)


def test_a_non_loopback_host_needs_tls_and_starts_with_it(bin_dir, tmp_path, pki):
    out = run_trainerd(bin_dir, tmp_path, "--host", "0.0.0.0")
    assert out.returncode == 2, out.stderr
    assert "--host 0.0.0.0 is not a loopback address" in out.stderr
    assert "--tls-cert and --tls-key, or tls.certFile and tls.keyFile" in out.stderr, out.stderr
    assert not (tmp_path / "data").exists()
    # With TLS (and tokens, which cannot be turned off) it starts, and answers HTTPS on loopback.
    service = start_trainerd(bin_dir, tmp_path / "open", {}, ca_file=pki["ca"],
                             args=("--host", "0.0.0.0", "--tls-cert", str(pki["cert"]), "--tls-key", str(pki["key"])))
    try:
        assert "listening on https://0.0.0.0:" in service.log_text()
        status, _, body = https_get(f"{service.url}/v1/runs", pki["ca"])
        assert status == 200, body
        # Without a token: 401, over TLS as over HTTP.
        opener = urllib.request.build_opener(
            urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(pki["ca"]))))
        with pytest.raises(urllib.error.HTTPError) as refused:
            opener.open(f"{service.url}/v1/runs", timeout=30)
        assert refused.value.code == 401
    finally:
        stop(service.proc, service.data_dir)


def test_bad_certificates_and_keys_are_refused_naming_the_setting_and_file(bin_dir, tmp_path, pki):
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate\n")
    missing = tmp_path / "missing.pem"
    cert, key = str(pki["cert"]), str(pki["key"])
    cases = [
        (["--tls-cert", str(garbage), "--tls-key", key], None,
         f"--tls-cert: '{garbage}' is not a readable PEM certificate"),
        (["--tls-cert", cert, "--tls-key", str(garbage)], None,
         f"--tls-key: '{garbage}' is not a readable PEM private key"),
        (["--tls-cert", cert, "--tls-key", str(missing)], None, f"--tls-key: cannot read the file '{missing}'"),
        (["--tls-cert", cert, "--tls-key", str(pki["other_key"])], None,
         f"--tls-key: '{pki['other_key']}' is not the private key of the certificate '{cert}'"),
        (["--tls-cert", cert], None, "--tls-cert (tls.certFile) is given without --tls-key (tls.keyFile)"),
        ([], {"tls": {"certFile": str(garbage), "keyFile": key}},
         f"tls.certFile: '{garbage}' is not a readable PEM certificate"),
        ([], {"tls": {"certFile": cert, "keyFile": key, "caFile": str(missing)}},
         f"tls.caFile: cannot read the file '{missing}'"),
        ([], {"tls": {"certFile": cert, "keyFile": key, "ca": "x"}}, "tls.ca"),
    ]
    for args, config, message in cases:
        out = run_trainerd(bin_dir, tmp_path, *args, config=config)
        assert out.returncode == 2, (args, config, out.stderr)
        assert message in out.stderr, (args, config, out.stderr)
        assert "listening" not in out.stderr


def test_login_keeps_the_ca_file_and_logout_forgets_it(tls_cli, tls_trainerd, pki, tmp_path):
    url = tls_trainerd.url
    key = address_key(url)
    token = token_for(url)
    assert token
    # A token file of its own, as written before CA files were kept: one other address's token.
    config = tmp_path / "config"
    token_file = config / "trainer" / "tokens.json"
    token_file.parent.mkdir(parents=True)
    token_file.write_text(json.dumps({"servers": {"http://127.0.0.1:1": "trn_other"}}))
    env = {"XDG_CONFIG_HOME": str(config), "TRAINER_CA_FILE": "", "TRAINER_TOKEN": ""}

    # Nothing kept for the address: the system's store does not know our CA.
    out = tls_cli("runs", "list", env=env)
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert "did not verify against the system's CA store" in out.stderr, out.stderr

    # Logging in with --ca-file given as a relative path keeps its absolute path beside the token.
    relative = os.path.relpath(pki["ca"], tmp_path)
    out = subprocess.run([str(tls_cli.binary), "--trainer-url", url, "--ca-file", relative, "login", "--token-stdin"],
                         input=token + "\n", capture_output=True, text=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, **env})
    assert out.returncode == 0, out.stderr
    assert f"the token and the CA file {pki['ca']} are kept in {token_file}" in out.stdout, out.stdout
    assert token_file.stat().st_mode & 0o777 == 0o600
    kept = json.loads(token_file.read_text())
    assert kept["servers"] == {"http://127.0.0.1:1": "trn_other", key: token}, kept
    assert kept["caFiles"] == {key: str(pki["ca"])}, kept

    # A later command naming no CA verifies with the kept one.
    listed = tls_cli("runs", "list", "-o", "json", env=env)
    assert listed.returncode == 0, listed.stderr
    assert "runs" in json.loads(listed.stdout)
    # --ca-file and TRAINER_CA_FILE still win over it.
    out = tls_cli("--ca-file", pki["other_ca"], "runs", "list", env=env)
    assert out.returncode == UNREACHABLE and f"the CA file {pki['other_ca']} (--ca-file)" in out.stderr, out.stderr
    out = tls_cli("runs", "list", env={**env, "TRAINER_CA_FILE": str(pki["other_ca"])})
    assert out.returncode == UNREACHABLE and f"the CA file {pki['other_ca']} (TRAINER_CA_FILE)" in out.stderr, \
        out.stderr
    # A kept CA that does not verify is named as the token file's.
    token_file.write_text(json.dumps({**kept, "caFiles": {key: str(pki["other_ca"])}}))
    out = tls_cli("runs", "list", env=env)
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert f"the CA file {pki['other_ca']} (the token file {token_file}, from `trainer login`)" in out.stderr, \
        out.stderr

    # logout forgets the address's token and CA file; the other address's entry stays.
    out = tls_cli("logout", env=env)
    assert out.returncode == 0, out.stderr
    assert f"Logged out of {url}" in out.stdout, out.stdout
    assert json.loads(token_file.read_text()) == {"servers": {"http://127.0.0.1:1": "trn_other"}}
    out = tls_cli("runs", "list", env=env)
    assert out.returncode == UNREACHABLE, out.stdout + out.stderr
    assert "did not verify against the system's CA store" in out.stderr, out.stderr
    # The token itself still works (logout does not revoke it).
    status, _, body = https_get(f"{url}/v1/runs", pki["ca"])
    assert status == 200, body


def test_an_upload_over_the_limit_is_refused_before_it_is_sent_over_https(tls_cli, pki, tmp_path):
    limits = tls_cli.json("--ca-file", pki["ca"], "info")["configuration"]["limits"]
    assert limits["maxDatasetBytes"] == DATASET_LIMIT
    row = (EXAMPLES / "sentiment" / "train.jsonl").read_text().splitlines()[0] + "\n"
    dataset = tmp_path / "big.jsonl"
    dataset.write_text(row * (DATASET_LIMIT // len(row) + 100))
    out = tls_cli("--ca-file", pki["ca"], "datasets", "create", "-f", dataset, "--name", "too-big", timeout=300)
    assert out.returncode == 1, (out.returncode, out.stderr)
    # The message over http:// (test_cli_faults.py): the service's answer to the head alone, the
    # limit, and what to do; not a connection dropped while sending.
    assert f"over the limit of {DATASET_LIMIT} bytes" in out.stderr, out.stderr
    assert "limits.maxDatasetBytes" in out.stderr and "split" in out.stderr, out.stderr
    assert "dropped" not in out.stderr and "cannot reach" not in out.stderr, out.stderr
    assert tls_cli("--ca-file", pki["ca"], "datasets", "get", "too-big").returncode != 0  # nothing registered

    # A body under the limit, large enough to be announced first, still goes in over https://.
    fits = tmp_path / "fits.jsonl"
    fits.write_text(row * ((300 << 10) // len(row)))
    out = tls_cli("--ca-file", pki["ca"], "datasets", "create", "-f", fits, "--name", "fits")
    assert out.returncode == 0, out.stderr
    assert "Registered dataset fits" in out.stdout
