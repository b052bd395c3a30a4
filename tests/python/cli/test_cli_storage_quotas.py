"""Storage quotas of uploads (issue 32, docs/security.md "Storage quotas"), through the CLI against a
real trainerd whose `quotas.storageBytes` is small: datasets and bundles uploaded for a workload
count against its quota, counted from the store's records; an upload past it is refused (409)
naming the quota, the bytes stored and the upload's size, and nothing is stored; the same rows
again add nothing; a workload's own storageQuotaBytes overrides the default (0: no limit);
uploads naming no workload count against the shared catalog; `workloads get` shows use against
quota; a token limited to a workload must name it."""
from __future__ import annotations

import json

import pytest

from cli_support import Cli, start_trainerd, stop

QUOTA = 1500  # bytes: a little over one of the datasets below


def rows(tag: str, n: int = 8) -> str:
    return "".join(json.dumps({"messages": [{"role": "user", "content": f"{tag} question {i}"},
                                            {"role": "assistant", "content": f"{tag} answer {i}"}]}) + "\n"
                   for i in range(n))


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    daemon = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), {"quotas": {"storageBytes": QUOTA}})
    try:
        cli = Cli(bin_dir / "trainer", daemon.url)
        for name, extra in (("team-a", ()), ("team-b", ()), ("unlimited", ("--storage-quota", "0"))):
            cli("workloads", "create", name, *extra, check=True)
        yield cli
    finally:
        stop(daemon.proc, daemon.data_dir)


def upload(cli, tmp_path, text: str, *args):
    f = tmp_path / "rows.jsonl"
    f.write_text(text)
    return cli("datasets", "create", "-f", f, *args)


def test_a_workloads_uploads_stop_at_its_quota_and_nothing_is_stored(cli, tmp_path):
    first = upload(cli, tmp_path, rows("a1"), "--workload", "team-a", "--name", "a1", "-o", "json")
    assert first.returncode == 0, first.stderr
    stored = json.loads(first.stdout)["bytes"]
    assert 0 < stored <= QUOTA
    storage = cli.json("workloads", "get", "team-a")["storage"]
    assert storage == {"usedBytes": stored, "quotaBytes": QUOTA}, storage

    before = cli.json("datasets", "list")["datasets"]
    second = upload(cli, tmp_path, rows("a2"), "--workload", "team-a", "--name", "a2")
    assert second.returncode != 0, second.stdout
    message = second.stderr
    assert "workload 'team-a' stores " + str(stored) + " bytes" in message, message
    assert f"storage quota of {QUOTA} bytes" in message and "nothing was stored" in message, message
    assert cli.json("datasets", "list")["datasets"] == before
    assert cli("datasets", "get", "a2").returncode != 0
    assert cli.json("workloads", "get", "team-a")["storage"]["usedBytes"] == stored

    # The same rows again store nothing new: not refused.
    again = upload(cli, tmp_path, rows("a1"), "--workload", "team-a")
    assert again.returncode == 0, again.stderr
    # Another workload has its own quota.
    other = upload(cli, tmp_path, rows("a2"), "--workload", "team-b", "-o", "json")
    assert other.returncode == 0, other.stderr
    size = json.loads(other.stdout)["bytes"]
    assert f"this dataset of {size} bytes" in message, message  # the refused upload's size
    assert cli.json("workloads", "get", "team-b")["storage"]["usedBytes"] == size


def test_a_workloads_own_quota_overrides_the_default(cli, tmp_path):
    for i in range(3):  # three datasets: past the default, within no limit
        out = upload(cli, tmp_path, rows(f"u{i}"), "--workload", "unlimited")
        assert out.returncode == 0, out.stderr
    storage = cli.json("workloads", "get", "unlimited")["storage"]
    assert storage["quotaBytes"] is None and storage["usedBytes"] > QUOTA, storage


def test_uploads_naming_no_workload_count_against_the_shared_catalog(cli, tmp_path):
    assert upload(cli, tmp_path, rows("s1")).returncode == 0
    out = upload(cli, tmp_path, rows("s2"))
    assert out.returncode != 0 and "the shared catalog" in out.stderr and "quotas.storageBytes" in out.stderr, out.stderr


def test_a_bundle_counts_against_its_workloads_quota(cli, tmp_path):
    folder = tmp_path / "bundle"
    (folder / "scoring").mkdir(parents=True)
    (folder / "scoring" / "__init__.py").write_text("")
    (folder / "scoring" / "big.py").write_text("# " + "x" * QUOTA + "\n")
    before = cli.json("bundles", "list")["bundles"]
    out = cli("bundles", "register", folder, "--name", "big", "--workload", "team-b")
    assert out.returncode != 0, out.stdout
    assert "files" in out.stderr and "this bundle version of" in out.stderr and "workload 'team-b'" in out.stderr, out.stderr
    assert cli.json("bundles", "list")["bundles"] == before
    (folder / "scoring" / "big.py").write_text("x = 1\n")
    small = cli.json("bundles", "register", folder, "--name", "small", "--workload", "unlimited")
    assert small["owner"]["workloadId"] == cli.json("workloads", "get", "unlimited")["id"]


def test_a_token_limited_to_a_workload_must_name_it(cli, tmp_path):
    token = cli.json("tokens", "create", "alice", "--role", "submit", "--workload", "team-b")["token"]
    as_alice = {"TRAINER_TOKEN": token}
    f = tmp_path / "rows.jsonl"
    f.write_text(rows("t1", 2))
    out = cli("datasets", "create", "-f", f, env=as_alice)
    assert out.returncode != 0 and "workload" in out.stderr, out.stderr
    out = cli("datasets", "create", "-f", f, "--workload", "team-a", env=as_alice)
    assert out.returncode != 0 and "workload 'team-a' not found" in out.stderr, out.stderr
    out = cli("datasets", "create", "-f", f, "--workload", "team-b", env=as_alice)
    assert out.returncode == 0, out.stderr
