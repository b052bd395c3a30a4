"""API tokens through the real CLI against a real trainerd (docs/security.md):

- trainerd writes a local admin token for its address into the token file (mode 0600, in a folder
  of mode 0700), one entry per address, so two trainerds at once keep both; `trainer` on the same
  machine finds it with nothing set;
- `tokens create` prints the secret once, `tokens list` never shows it (nor its hash), and the
  store keeps only its SHA-256;
- a token's roles and workloads hold through the CLI: a read token reads and cannot cancel; a
  submit token of one workload cannot see another's run; `TRAINER_TOKEN` overrides the file;
- `trainer login --token-stdin` keeps a token for an address, and refuses one the service does not
  know, changing nothing;
- a revoked token gets 401 at once; bad `tokens create` requests are refused by name and make nothing;
- a restarted trainerd on another port makes a token for its new address; one on the same
  address keeps the file's token.
"""
from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import stat

from auth import address_key, token_file, token_for
from cli_support import WORKLOAD, Cli, plan_text, start_run_id, start_trainerd, stop


def test_trainerd_keeps_a_local_token_per_address_in_a_private_file(bin_dir, tmp_path, trainerd):
    path = token_file()
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    second = start_trainerd(bin_dir, tmp_path / "second", {})
    try:
        servers = json.loads(path.read_text())["servers"]
        assert address_key(trainerd.url) in servers and address_key(second.url) in servers
        assert servers[address_key(trainerd.url)] != servers[address_key(second.url)]
        # The CLI finds each one's token by the address alone.
        for url in (trainerd.url, second.url):
            out = Cli(bin_dir / "trainer", url)("workloads", "list", "-o", "json")
            assert out.returncode == 0, out.stderr
        # localhost is the same address as 127.0.0.1.
        local = Cli(bin_dir / "trainer", trainerd.url.replace("127.0.0.1", "localhost"))
        assert local("workloads", "list").returncode == 0
    finally:
        stop(second.proc, second.data_dir)


def test_a_token_is_shown_once_and_stored_as_its_hash(cli, trainerd):
    made = cli.json("tokens", "create", "reader", "--role", "read")
    secret = made["token"]
    assert secret.startswith("trn_") and len(secret) == 68
    assert made["roles"] == ["read"] and made["allWorkloads"] is True
    listed = cli.json("tokens", "list")["tokens"]
    mine = next(t for t in listed if t["tokenId"] == made["tokenId"])
    assert "token" not in mine and "hash" not in mine
    assert secret not in json.dumps(listed)
    text = cli("tokens", "list", check=True).stdout
    assert made["tokenId"] in text and "reader" in text and secret not in text
    db = sqlite3.connect(str(trainerd.data_dir / "state.db"))
    try:
        rows = db.execute("SELECT hash, doc FROM api_tokens WHERE id = ?", (made["tokenId"],)).fetchall()
    finally:
        db.close()
    assert rows[0][0] == hashlib.sha256(secret.encode()).hexdigest()
    assert secret not in rows[0][1]


def test_roles_and_workloads_hold_through_the_cli(ready, trainerd):
    run_id = start_run_id(ready, plan_text(max_steps=2000))
    ready("workloads", "create", "other-team", check=True)
    reader = ready.json("tokens", "create", "reader", "--role", "read")["token"]
    other = ready.json("tokens", "create", "other", "--role", "submit", "--workload", "other-team")["token"]
    # TRAINER_TOKEN overrides the token file.
    out = ready("runs", "get", run_id, "-o", "json", env={"TRAINER_TOKEN": reader})
    assert out.returncode == 0, out.stderr
    out = ready("runs", "cancel", run_id, "--force", env={"TRAINER_TOKEN": reader})
    assert out.returncode != 0 and "needs the submit role" in out.stderr, out.stderr
    out = ready("runs", "cancel", run_id, "--force", env={"TRAINER_TOKEN": other})
    assert out.returncode != 0 and f"run '{run_id}' not found" in out.stderr, out.stderr
    out = ready("runs", "list", "--workload", WORKLOAD, env={"TRAINER_TOKEN": other})
    assert out.returncode != 0 and f"workload '{WORKLOAD}' not found" in out.stderr, out.stderr
    assert ready.json("runs", "get", run_id)["phase"] not in ("CANCELLED", "CLEANING_UP")
    out = ready("runs", "cancel", run_id, "--force")
    assert out.returncode == 0, out.stderr


def test_login_keeps_a_known_token_and_refuses_an_unknown_one(cli, trainerd):
    local = token_for(trainerd.url)
    made = cli.json("tokens", "create", "laptop", "--role", "read")
    out = cli("login", "--token-stdin", input="trn_" + "0" * 64 + "\n")
    assert out.returncode != 0 and "not known" in out.stderr, out.stderr
    assert token_for(trainerd.url) == local  # nothing changed
    try:
        out = cli("login", "--token-stdin", input=made["token"] + "\n")
        assert out.returncode == 0, out.stderr
        assert token_for(trainerd.url) == made["token"]
        out = cli("tokens", "list")  # the read token now in use may not list tokens
        assert out.returncode != 0 and "needs the admin role" in out.stderr, out.stderr
    finally:
        out = cli("login", "--token-stdin", input=local + "\n")
        assert out.returncode == 0, out.stderr


def test_a_revoked_token_is_refused_at_once(cli):
    made = cli.json("tokens", "create", "short-lived", "--role", "read")
    assert cli("workloads", "list", env={"TRAINER_TOKEN": made["token"]}).returncode == 0
    revoked = cli.json("tokens", "revoke", made["tokenId"])
    assert revoked["revokedAt"]
    out = cli("workloads", "list", env={"TRAINER_TOKEN": made["token"]})
    assert out.returncode != 0 and f"the API token {made['tokenId']} was revoked" in out.stderr, out.stderr


def test_bad_token_requests_are_refused_by_name_and_make_nothing(cli):
    before = len(cli.json("tokens", "list")["tokens"])
    cases = [
        (["nobody"], "--role ROLE"),
        (["nobody", "--role", "root"], "unknown role \"root\""),
        (["nobody", "--role", "read", "--workload", "no-such-workload"], "workloads[0]"),
        (["nobody", "--role", "read", "--expires-at", "tomorrow"], "expiresAt"),
        (["nobody", "--role", "read", "--expires-at", "2001-01-01T00:00:00Z"], "in the past"),
    ]
    for flags, message in cases:
        out = cli("tokens", "create", *flags)
        assert out.returncode != 0 and message in out.stderr, (flags, out.stderr)
    assert len(cli.json("tokens", "list")["tokens"]) == before
    out = cli("tokens", "revoke", "zzzz")
    assert out.returncode != 0 and "token 'zzzz' not found" in out.stderr, out.stderr


def test_a_call_without_any_token_is_refused_naming_how_to_get_one(bin_dir, trainerd, tmp_path):
    env = {"XDG_CONFIG_HOME": str(tmp_path / "empty-config")}
    out = Cli(bin_dir / "trainer", trainerd.url)("workloads", "list", env=env)
    assert out.returncode != 0 and "needs an API token" in out.stderr and "trainer login" in out.stderr, out.stderr


def test_a_restarted_trainerd_keeps_its_token_on_the_same_address_and_makes_one_for_a_new_one(bin_dir, tmp_path):
    first = start_trainerd(bin_dir, tmp_path / "svc", {})
    port = int(first.url.rsplit(":", 1)[1])
    token = token_for(first.url)
    stop(first.proc, first.data_dir)
    again = start_trainerd(bin_dir, tmp_path / "svc", {}, port=port)
    try:
        assert token_for(again.url) == token
    finally:
        stop(again.proc, again.data_dir)
    moved = start_trainerd(bin_dir, tmp_path / "svc", {})
    try:
        assert moved.url != first.url
        assert token_for(moved.url) not in (None, token)
        assert Cli(bin_dir / "trainer", moved.url)("workloads", "list").returncode == 0
    finally:
        stop(moved.proc, moved.data_dir)
