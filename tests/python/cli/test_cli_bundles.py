"""Registered scoring bundles through the product: `trainer bundles register` copies a Python
package folder into trainerd's data folder, content-addressed and versioned per name; an RL run's
bundle:NAME[:VERSION]#MODULE[:FUNCTION] term is resolved at submission to the stored folder of that
version (the latest by default), and its function scores the run. A run pinned to version 1 keeps
scoring with version 1 after version 2 is registered."""
from __future__ import annotations

import json

import pytest

from cli_support import call

from graders_support import DATASET, MODEL, WORKLOAD, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)  # its RL runs are waited for up to 900 s each (graders_support.run_to_end)

SCORER = '''
def by_label(data_source, solution_str, ground_truth, extra_info):
    return {SCORE}
'''


def write_bundle(folder, score: float):
    (folder / "scoring").mkdir(parents=True, exist_ok=True)
    (folder / "scoring" / "__init__.py").write_text("")
    (folder / "scoring" / "labels.py").write_text(SCORER.replace("{SCORE}", repr(score)))
    (folder / "scoring" / "__pycache__").mkdir(exist_ok=True)
    (folder / "scoring" / "__pycache__" / "labels.cpython-311.pyc").write_bytes(b"\x00\xff not source")
    return folder


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                        reward_python=True) as (service, cli):
        cli.service = service
        yield cli


def test_registering_versions_a_bundle_by_its_content(cli, tmp_path):
    folder = write_bundle(tmp_path / "rewards", 1.0)
    first = cli("bundles", "register", folder, "--name", "labels", check=True).stdout
    assert "Registered bundle labels version 1" in first and "2 files" in first, first  # no __pycache__
    again = cli("bundles", "register", folder, "--name", "labels", check=True).stdout
    assert "Unchanged: bundle labels version 1 already holds these files" in again, again
    v1 = cli.json("bundles", "get", "labels")
    assert v1["version"] == 1 and v1["files"] == 2
    assert v1["path"] == str(cli.service.data_dir / "bundles" / v1["sha"])
    assert (cli.service.data_dir / "bundles" / v1["sha"] / "scoring" / "labels.py").read_text().strip().endswith("1.0")

    write_bundle(folder, 0.25)
    v2 = cli.json("bundles", "register", folder, "--name", "labels")
    assert v2["version"] == 2 and v2["sha"] != v1["sha"]
    assert cli.json("bundles", "get", "labels")["version"] == 2  # the latest
    assert cli.json("bundles", "get", "labels:1")["sha"] == v1["sha"]
    assert cli.json("bundles", "get", v1["sha"][:12])["version"] == 1
    listed = cli.json("bundles", "list")["bundles"]
    assert [(b["name"], b["version"]) for b in listed] == [("labels", 1), ("labels", 2)]
    # The stored version 1 is untouched by version 2.
    assert (cli.service.data_dir / "bundles" / v1["sha"] / "scoring" / "labels.py").read_text().strip().endswith("1.0")


def rewards_of(steps):
    return [r for s in steps for r in s["rl"]["rewards"]]


def test_a_registered_bundles_function_scores_and_a_pinned_run_keeps_its_version(cli, tmp_path):
    v1 = cli.json("bundles", "get", "labels:1")
    v2 = cli.json("bundles", "get", "labels:2")
    run, steps = run_to_end(cli, plan("{kind: 'bundle:labels:1#scoring.labels:by_label'}"), tmp_path)
    assert set(rewards_of(steps)) == {1.0}, rewards_of(steps)
    assert steps[0]["rl"]["terms"][0]["name"] == "bundle:scoring.labels:by_label"
    # The resolved plan records the stored folder it ran.
    term = run["plan"]["config"]["reward"]["terms"][0]
    assert term["kind"] == f"bundle:{v1['path']}#scoring.labels:by_label", term

    latest, steps = run_to_end(cli, plan("{kind: 'bundle:labels#scoring.labels:by_label'}"), tmp_path)
    assert set(rewards_of(steps)) == {0.25}, rewards_of(steps)
    assert latest["plan"]["config"]["reward"]["terms"][0]["kind"] == f"bundle:{v2['path']}#scoring.labels:by_label"

    by_hash, steps = run_to_end(cli, plan(f"{{kind: 'bundle:{v1['sha'][:10]}#scoring.labels:by_label'}}"), tmp_path)
    assert set(rewards_of(steps)) == {1.0}, rewards_of(steps)


def test_an_unknown_bundle_or_version_is_refused_by_name(cli):
    for kind, says in [("bundle:nobody#scoring.labels", "no bundle named or hashed 'nobody' (registered: labels)"),
                       ("bundle:labels:9#scoring.labels", "bundle 'labels' has no version 9; it has 1, 2"),
                       ("bundle:labels", "a registered bundle is named with its module")]:
        out = cli("runs", "start", "-f", "-", "--dry-run", input=plan(f"{{kind: '{kind}'}}"))
        assert out.returncode != 0, kind
        assert "config.reward.terms[0].kind" in out.stderr and says in out.stderr, out.stderr
    bad = cli("bundles", "register", "/no/such/folder", "--name", "labels")
    assert bad.returncode != 0 and "/no/such/folder: no such folder" in bad.stderr, bad.stderr


def test_an_evaluation_grades_with_the_registered_version_it_names(cli):
    v1 = cli.json("bundles", "get", "labels:1")
    done = cli.json("evaluations", "start", "--model", MODEL, "--workload", WORKLOAD, "--dataset", DATASET,
                    "--grader", "bundle:labels:1#scoring.labels:by_label", "--max-new-tokens", "4", "--wait", "-q")
    assert done["phase"] == "COMPLETED", done
    assert done["grader"]["kind"] == f"bundle:{v1['path']}#scoring.labels:by_label"
    assert done["report"]["meanScore"] == 1.0, done["report"]
    refused = cli("evaluations", "start", "--model", MODEL, "--workload", WORKLOAD, "--dataset", DATASET,
                  "--grader", "bundle:labels:7#scoring.labels")
    assert refused.returncode != 0 and "bundle 'labels' has no version 7" in refused.stderr, refused.stderr


def registered_versions(cli) -> list:
    out = cli("bundles", "list", "-o", "json")
    assert out.returncode == 0, out.stderr
    return [(b["name"], b["version"]) for b in json.loads(out.stdout)["bundles"]]


def test_a_folder_with_a_link_out_of_it_or_a_huge_file_is_refused_before_anything_is_sent(cli, tmp_path):
    """A link to /etc/passwd would carry a host file into the service; a 10 GB file would be read
    whole into memory. Both are refused by the CLI, naming the entry, and nothing is registered."""
    before = registered_versions(cli)
    linked = write_bundle(tmp_path / "linked", 0.5)
    (linked / "scoring" / "secrets.py").symlink_to("/etc/passwd")
    out = cli("bundles", "register", str(linked), "--name", "linked")
    assert out.returncode != 0
    assert "scoring/secrets.py: a link leading outside the bundle's folder (to /etc/passwd)" in out.stderr, out.stderr

    escaping = write_bundle(tmp_path / "escaping", 0.5)
    (escaping / "scoring" / "up.py").symlink_to("../../linked/scoring/labels.py")
    out = cli("bundles", "register", str(escaping), "--name", "escaping")
    assert out.returncode != 0 and "scoring/up.py: a link leading outside" in out.stderr, out.stderr

    huge = write_bundle(tmp_path / "huge", 0.5)
    with open(huge / "scoring" / "weights.bin", "wb") as f:
        f.truncate(10 * 1024 ** 3)  # sparse: 10 GB long, nothing on disk
    out = cli("bundles", "register", str(huge), "--name", "huge")
    assert out.returncode != 0
    assert "scoring/weights.bin: 10737418240 bytes; a bundle's file holds at most 8388608 bytes" in out.stderr, \
        out.stderr

    inside = write_bundle(tmp_path / "inside", 0.5)
    (inside / "scoring" / "alias.py").symlink_to("labels.py")  # a link within the folder is its target's bytes
    out = cli("bundles", "register", str(inside), "--name", "inside")
    assert out.returncode == 0, out.stderr
    assert set(registered_versions(cli)) == set(before) | {("inside", 1)}


def test_the_api_refuses_paths_leaving_the_bundle_and_oversized_files_by_field(cli):
    url = cli.service.url
    before = registered_versions(cli)
    for files, field, says in [
        ([{"path": "../evil.py", "content": ""}], "files[0].path", "no '..'"),
        ([{"path": "/etc/cron.d/evil.py", "content": ""}], "files[0].path", "no leading '/'"),
        ([{"path": "ok.py", "content": ""}, {"path": "big.py", "content": "x" * (8 * 1024 * 1024 + 1)}],
         "files[1].content", "holds 8388609 bytes; a bundle's file holds at most 8388608 bytes"),
    ]:
        status, answer = call(f"{url}/v1/bundles", "POST", {"name": "evil", "files": files})
        assert status == 400, (status, answer)
        assert field in json.dumps(answer) and says in json.dumps(answer), answer
    assert registered_versions(cli) == before
