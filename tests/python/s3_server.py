"""A real S3-compatible server for the tests: SeaweedFS's `weed` (Apache-2.0, built from its Go
module by tools/build-weed, which tools/setup runs), started on loopback with an identities file,
so that it checks every request's SigV4 signature. Started once per test session, stopped with
SIGKILL (weed ignores SIGTERM for a long time)."""
from __future__ import annotations

import dataclasses
import json
import os
import pathlib
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
ACCESS_KEY = "trainer-test-key"
SECRET_KEY = "trainer-test-secret-0123456789"


def _free_port() -> int:
    """A free port whose +10000 neighbour (weed's gRPC port for it) is free too."""
    for _ in range(200):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port + 10000 > 65535 or port in range(10002, 20000):
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RuntimeError("no free port pair for weed")


@dataclasses.dataclass
class S3Server:
    endpoint: str
    access_key: str
    secret_key: str
    proc: subprocess.Popen
    log: pathlib.Path
    argv: tuple = ()  # how it was started: restart_s3_server() starts it again the same way

    def env(self) -> dict:
        return {"TRAINER_S3_ENDPOINT": self.endpoint, "AWS_ACCESS_KEY_ID": self.access_key,
                "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_REGION": "us-east-1"}


def weed_binary() -> str:
    out = subprocess.run([str(REPO / "tools" / "build-weed")], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"tools/build-weed failed (tools/setup builds it):\n{out.stderr[-3000:]}")
    return out.stdout.strip()


def start_s3_server(tmp: pathlib.Path, attempts: int = 3) -> S3Server:
    """weed on fresh loopback ports. A start that does not answer within a minute is stopped and
    made again on other ports and a fresh data folder (once in a CI run its S3 port, listening by
    weed's log, answered no request for two minutes under load); the failure names what every
    attempt's probe saw."""
    weed = weed_binary()
    tmp.mkdir(parents=True, exist_ok=True)
    identities = tmp / "identities.json"
    identities.write_text(json.dumps({"identities": [{
        "name": "trainer", "credentials": [{"accessKey": ACCESS_KEY, "secretKey": SECRET_KEY}],
        "actions": ["Admin", "Read", "Write", "List", "Tagging"]}]}))
    log = tmp / "weed.log"
    seen = []
    for attempt in range(attempts):
        ports = {name: _free_port() for name in ("master", "volume", "filer", "s3")}
        data = tmp / ("data" if attempt == 0 else f"data-{attempt}")
        data.mkdir(exist_ok=True)
        argv = (weed, "server", f"-dir={data}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
                f"-master.port={ports['master']}", f"-volume.port={ports['volume']}", f"-filer.port={ports['filer']}",
                "-s3", f"-s3.port={ports['s3']}", f"-s3.config={identities}", "-volume.max=0",
                "-master.volumeSizeLimitMB=64")
        endpoint = f"http://127.0.0.1:{ports['s3']}"
        server, last = _launch(argv, endpoint, log, 60)
        if server is not None:
            return server
        seen.append(f"attempt {attempt + 1} on {endpoint}: {last}")
    pytest.fail(f"weed's S3 server did not come up in {attempts} attempts:\n" + "\n".join(seen) +
                f"\n{log.read_text(errors='replace')[-4000:]}")


def restart_s3_server(server: S3Server) -> S3Server:
    """Starts a stopped server again on its ports and data folder: the same endpoint, the same
    buckets and objects."""
    stop_s3_server(server.proc)
    started, last = _launch(server.argv, server.endpoint, server.log, 120)
    if started is None:
        pytest.fail(f"weed's S3 server did not come up again on {server.endpoint} ({last}):\n"
                    f"{server.log.read_text(errors='replace')[-4000:]}")
    return started


def _launch(argv: tuple, endpoint: str, log: pathlib.Path, within_s: float) -> tuple[S3Server | None, str]:
    """Starts weed and waits until its S3 port refuses an unsigned request (it is up); the server,
    or None (stopped again) and what the last probe saw."""
    with open(log, "ab") as out:
        proc = subprocess.Popen(list(argv), stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.time() + within_s
    last = "no probe answered"
    while True:
        try:
            urllib.request.urlopen(endpoint + "/", timeout=2)
            break
        except urllib.error.HTTPError as e:
            if e.code == 403:
                break  # it refuses an unsigned request: up (a 5xx such as 501: still starting)
            last = f"HTTP {e.code}"
        except (urllib.error.URLError, ConnectionError, OSError) as e:
            last = f"{type(e).__name__}: {e}"
        if proc.poll() is not None:
            return None, f"weed exited with {proc.returncode}; before, {last}"
        if time.time() > deadline:
            stop_s3_server(proc)
            return None, last
        time.sleep(0.5)
    return S3Server(endpoint, ACCESS_KEY, SECRET_KEY, proc, log, argv), last


def stop_s3_server(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=3)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
