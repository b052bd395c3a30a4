"""The trainer CLI where no service is needed: errors, usage, help, local plan checks."""
from __future__ import annotations

from cli_support import Cli, free_port, plan_text


# ---- no service ----------------------------------------------------------------------------

def test_a_service_that_is_not_answering_is_named_with_its_url(bin_dir):
    port = free_port()
    cli = Cli(bin_dir / "trainer", None)
    url = f"http://127.0.0.1:{port}"
    for args, env in ((["info", "--trainer-url", url], None), (["runs", "list"], {"TRAINER_URL": url})):
        out = cli(*args, env=env)
        assert out.returncode == 6
        assert out.stderr == (f"trainer: cannot reach the trainer service at {url} (connection refused); "
                              "start it with `trainerd` or set --trainer-url/TRAINER_URL\n")
        assert out.stdout == ""


def test_the_default_address_is_localhost_9001(bin_dir):
    out = Cli(bin_dir / "trainer", None)("runs", "list", "--help")
    assert "http://localhost:9001" in out.stdout
    assert "--limit N" in out.stdout and "--phase PHASE" in out.stdout


def test_plan_errors_name_the_field_before_anything_is_sent(bin_dir, tmp_path):
    cli = Cli(bin_dir / "trainer", f"http://127.0.0.1:{free_port()}")  # nothing listens there
    bad = tmp_path / "plan.yaml"
    bad.write_text(plan_text().replace("optimizer: {learningRate: 0.003}",
                                       "optimizer: {learningRate: 0.003}\n    lora: {rank: -1}"))
    out = cli("runs", "start", "-f", bad, "--dry-run")
    assert out.returncode == 1
    assert out.stderr.startswith(f"trainer: {bad}:8:12: config.hyperparams.lora.rank: "), out.stderr
    unknown = plan_text() + "config2: 1\n"
    out = cli("runs", "start", "-f", "-", "--dry-run", input=unknown)
    assert out.returncode == 1
    assert "config2" in out.stderr and "unknown field" in out.stderr
    assert out.stderr.startswith("trainer: stdin:12:1: config2: unknown field; did you mean config?"), out.stderr
    typo = plan_text().replace("maxSeqLength", "maxSeqLen")
    out = cli("runs", "start", "-f", "-", "--dry-run", input=typo)
    assert "config.maxSeqLen: unknown field; did you mean maxSeqLength?" in out.stderr, out.stderr


def test_usage_errors_say_where_to_look(bin_dir):
    cli = Cli(bin_dir / "trainer", None)
    out = cli("runs", "wait", "abc", "--timeout", "soon")
    assert out.returncode == 2
    assert "--timeout \"soon\" is not a duration" in out.stderr
    out = cli("runs", "lst")
    assert out.returncode == 2
    assert "unknown command \"lst\"" in out.stderr and "trainer runs --help" in out.stderr


def test_help_on_every_level(bin_dir):
    cli = Cli(bin_dir / "trainer", None)
    for path in ([], ["runs"], ["runs", "start"], ["runs", "wait"], ["base-models", "select"],
                 ["datasets", "measure"], ["workloads", "refs", "set"], ["capacity"], ["capacity", "device-hours"],
                 ["capacity", "scan"], ["info"]):
        out = cli(*path, "--help")
        assert out.returncode == 0, (path, out.stderr)
        assert "Usage:" in out.stdout and "--trainer-url" in out.stdout
