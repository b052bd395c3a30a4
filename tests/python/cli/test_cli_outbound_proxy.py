"""Outbound calls through the operator's HTTP proxy (issue 32, docs/security.md "Outbound calls"),
through `trainer runs start` against a real trainerd configured with `outbound.proxy`, a real job,
a real http: evaluator on loopback (graders_support.py) and a real forward proxy written here
(absolute-form requests and CONNECT tunnels; it counts what it is asked for):

- the run's http: term reaches the evaluator through the proxy: the proxy counted each call;
- the allow-list still holds, on the target: a name allowed when trainerd checked it that resolves
  to a private address when the job calls it is refused by the job before the call, and the proxy
  is never contacted. The name's answers come from the test hosts file TRAINER_TEST_HOSTS_FILE (a
  fake, named as such); the refusal is the real code's;
- a proxy that is not an http://HOST:PORT URL keeps trainerd from starting, naming outbound.proxy.
"""
from __future__ import annotations

import json
import select
import socket
import socketserver
import subprocess
import threading

import pytest

from graders_support import DATASET, MODEL, WORKLOAD, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)


class ForwardProxy:
    """A small HTTP forward proxy on loopback: `METHOD http://HOST:PORT/PATH` requests are sent on
    to the target (Connection: close), `CONNECT HOST:PORT` opens a tunnel. `seen` lists
    (method, target) of every request, in order."""

    def __init__(self):
        self.seen: list[tuple[str, str]] = []
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.StreamRequestHandler):
            def handle(self):
                line = self.rfile.readline(65536).decode("latin-1").strip()
                if not line:
                    return
                method, target, _ = line.split(" ", 2)
                headers = []
                while (h := self.rfile.readline(65536).decode("latin-1")) not in ("\r\n", "\n", ""):
                    headers.append(h.rstrip("\r\n"))
                with proxy._lock:
                    proxy.seen.append((method, target))
                if method == "CONNECT":
                    host, port = target.rsplit(":", 1)
                    with socket.create_connection((host, int(port)), timeout=30) as upstream:
                        self.wfile.write(b"HTTP/1.1 200 Connection established\r\n\r\n")
                        self.wfile.flush()
                        pipe(self.connection, upstream)
                    return
                rest = target.split("://", 1)[1]
                hostport, _, path = rest.partition("/")
                host, _, port = hostport.rpartition(":")
                length = 0
                kept = []
                for h in headers:
                    name, _, value = h.partition(":")
                    if name.lower() == "content-length":
                        length = int(value)
                    if name.lower() not in ("connection", "proxy-connection", "keep-alive"):
                        kept.append(h)
                body = self.rfile.read(length) if length else b""
                with socket.create_connection((host, int(port)), timeout=30) as upstream:
                    head = f"{method} /{path} HTTP/1.1\r\n" + "".join(h + "\r\n" for h in kept) + "Connection: close\r\n\r\n"
                    upstream.sendall(head.encode("latin-1") + body)
                    while chunk := upstream.recv(65536):
                        self.wfile.write(chunk)

        self._server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def targets(self) -> list[str]:
        with self._lock:
            return [t for _, t in self.seen]

    def close(self):
        self._server.shutdown()
        self._server.server_close()


def pipe(a: socket.socket, b: socket.socket) -> None:
    """Copies bytes both ways until either side closes."""
    while True:
        ready, _, _ = select.select([a, b], [], [], 30)
        if not ready:
            return
        for s in ready:
            data = s.recv(65536)
            if not data:
                return
            (b if s is a else a).sendall(data)


@pytest.fixture(scope="module")
def proxy():
    p = ForwardProxy()
    yield p
    p.close()


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory, evaluator, proxy, hosts):
    hosts.write_text("")
    port = evaluator.url.rsplit(":", 1)[1]
    config = {"outbound": {"allow": [f"127.0.0.1:{port}", "*:*"], "proxy": proxy.url}}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("TRAINER_TEST_HOSTS_FILE", str(hosts))  # trainerd's environment reaches its jobs
        with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                            config=config) as (_, cli):
            yield cli


def test_the_configuration_shows_the_proxy(cli, proxy):
    assert cli.json("info")["configuration"]["outbound"]["proxy"] == proxy.url


def test_an_http_term_reaches_its_evaluator_through_the_proxy(cli, evaluator, proxy, tmp_path):
    url = f"{evaluator.url}/eval-good/evaluate"
    before_proxy = proxy.targets().count(url)
    before = len(evaluator.requests["eval-good"])
    _, steps = run_to_end(cli, plan(f"{{kind: 'http:{url}'}}"), tmp_path)
    calls = len(evaluator.requests["eval-good"]) - before
    assert calls == sum(len(s["rl"]["rewards"]) for s in steps) and calls > 0, calls
    # Every call went through the proxy, as an absolute-form POST to the evaluator.
    assert proxy.targets().count(url) - before_proxy == calls, proxy.seen[-5:]
    assert all(m == "POST" for m, t in proxy.seen if t == url)


def test_a_target_refused_at_the_call_never_reaches_the_proxy(cli, evaluator, proxy, hosts, tmp_path):
    port = evaluator.url.rsplit(":", 1)[1]
    url = f"http://rebind.test:{port}/eval-good/evaluate"
    hosts.write_text("rebind.test 203.0.113.7\n")  # a public (documentation) address when trainerd checks it
    f = tmp_path / "plan.yaml"
    f.write_text(plan(f"{{kind: 'http:{url}'}}"))
    run_id = cli.json("runs", "start", "-f", f, "--force")["runId"]
    hosts.write_text("rebind.test 10.0.0.7\n")  # a private address when the job calls it
    cli("runs", "wait", run_id, "--timeout", "15m", timeout=1000)
    run = cli.json("runs", "get", run_id)
    assert run["phase"] == "FAILED", run
    reason = run["failureReason"]
    assert "rebind.test" in reason and "10.0.0.7 is a private address" in reason, reason
    assert not [t for t in proxy.targets() if "rebind.test" in t], proxy.seen  # the proxy was never asked


def test_a_proxy_that_is_not_an_http_url_keeps_trainerd_from_starting(bin_dir, tmp_path):
    for bad in ("https://proxy:3128", "http://user:secret@proxy:3128", "http://proxy", "socks5://proxy:1080"):
        (tmp_path / "config.json").write_text(json.dumps({"outbound": {"proxy": bad}}))
        out = subprocess.run([str(bin_dir / "trainerd"), "--port", "0", "--data-dir", str(tmp_path / "data"),
                              "--config", str(tmp_path / "config.json")], capture_output=True, text=True, timeout=60)
        assert out.returncode != 0, (bad, out.stderr)
        assert "outbound.proxy" in out.stderr and "http://HOST:PORT" in out.stderr, (bad, out.stderr)
        assert "secret" not in out.stderr, out.stderr  # credentials are not echoed
