"""The three executables start and report who they are."""
import subprocess


def run(path, *args):
    return subprocess.run([str(path), *args], capture_output=True, text=True, timeout=60)


def test_each_executable_reports_its_version(bin_dir):
    for name in ("trainerd", "trainer-job", "trainer"):
        out = run(bin_dir / name, "--version")
        assert out.returncode == 0, out.stderr
        assert out.stdout.startswith(name + " "), out.stdout


def test_trainer_job_uses_the_pinned_libtorch(bin_dir):
    import torch

    out = run(bin_dir / "trainer-job", "--version")
    assert f"libtorch {torch.__version__.split('+')[0]}" in out.stdout
