"""The tests' side of API tokens (docs/security.md).

Every trainerd the tests start keeps a local admin token for its address in the token file under
$XDG_CONFIG_HOME/trainer/tokens.json; conftest.py points XDG_CONFIG_HOME at a folder of the test
session's own, so the tests' trainerds never touch the user's file, and the `trainer` binary the
tests run reads the same file. install() makes every urllib request that carries no Authorization
header of its own send the token kept for its address, as the CLI does.
"""
from __future__ import annotations

import json
import os
import pathlib
import sqlite3
import urllib.parse
import urllib.request


def token_file() -> pathlib.Path:
    """The token file trainerd writes and `trainer` reads, as the environment says."""
    base = os.environ.get("XDG_CONFIG_HOME") or str(pathlib.Path.home() / ".config")
    return pathlib.Path(base) / "trainer" / "tokens.json"


def address_key(url: str) -> str:
    """The token file's key of a server address: scheme://host:port, localhost as 127.0.0.1."""
    parts = urllib.parse.urlsplit(url if "://" in url else "http://" + url)
    host = parts.hostname or ""
    if host == "localhost":
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return f"{parts.scheme}://{host}:{port}"


def token_for(url: str) -> str | None:
    """The token the token file keeps for the server at `url` (None when it keeps none)."""
    try:
        servers = json.loads(token_file().read_text()).get("servers", {})
    except (OSError, ValueError):
        return None
    token = servers.get(address_key(url))
    return token if isinstance(token, str) and token else None


def auth_headers(url: str) -> dict:
    """{"Authorization": "Bearer TOKEN"} for the server at `url`; {} when no token is kept for it."""
    token = token_for(url)
    return {"Authorization": f"Bearer {token}"} if token else {}


class _TokenHandler(urllib.request.BaseHandler):
    """Adds the kept token to a request that carries no Authorization header of its own."""
    handler_order = 100

    def http_request(self, req):
        if not req.has_header("Authorization"):
            token = token_for(req.full_url)
            if token:
                req.add_unredirected_header("Authorization", f"Bearer {token}")
        return req

    https_request = http_request


def install() -> None:
    """Makes urllib.request.urlopen send the kept token (see the module's docstring)."""
    urllib.request.install_opener(urllib.request.build_opener(_TokenHandler()))


_RAW = urllib.request.build_opener()  # no token handler: each request sends exactly what it is given


def call_as(url: str, method: str, path: str, token: str | None, body=None, timeout: float = 60,
            headers: dict | None = None):
    """(status, headers, parsed JSON or raw text) of one request sending exactly `token` (none
    when it is None or empty) and `headers`, not the token kept for the address: what the role and
    audit tests check."""
    import urllib.error

    data = json.dumps(body).encode() if body is not None else None
    sent = {"Content-Type": "application/json", **(headers or {})}
    if token:
        sent["Authorization"] = f"Bearer {token}"
    req = urllib.request.Request(url + path, data=data, method=method, headers=sent)
    try:
        with _RAW.open(req, timeout=timeout) as r:
            raw, status, got = r.read(), r.status, dict(r.headers)
    except urllib.error.HTTPError as e:
        raw, status, got = e.read(), e.code, dict(e.headers)
    try:
        return status, got, json.loads(raw)
    except ValueError:
        return status, got, raw.decode(errors="replace")


def job_credentials(data_dir: pathlib.Path, job_id: str) -> dict:
    """The headers a job attempt `job_id` ("RUN-ATTEMPT") authenticates with (X-Trainer-Job and
    the Bearer TRAINER_JOB_TOKEN), read from the SQLite store of the trainerd in `data_dir`; {}
    while the store has no such attempt."""
    db = sqlite3.connect(str(data_dir / "state.db"), timeout=30)
    try:
        row = db.execute("SELECT token FROM job_attempts WHERE job_id = ?", (job_id,)).fetchone()
    finally:
        db.close()
    return {"X-Trainer-Job": job_id, "Authorization": f"Bearer {row[0]}"} if row else {}


def serving_secret(data_dir: pathlib.Path, endpoint_id: str) -> dict:
    """The headers an endpoint's serving process answers (Authorization: Bearer SECRET, the secret
    trainerd handed its process, docs/security.md "Serving processes"), read from the endpoint's
    job record in the SQLite store of the trainerd in `data_dir`; {} while it holds none."""
    db = sqlite3.connect(str(data_dir / "state.db"), timeout=30)
    try:
        row = db.execute("SELECT doc FROM endpoints WHERE id = ?", (endpoint_id,)).fetchone()
    finally:
        db.close()
    secret = json.loads(row[0]).get("_job", {}).get("secret") if row else None
    return {"Authorization": f"Bearer {secret}"} if secret else {}
