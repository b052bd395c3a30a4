"""Fixtures and helpers of the telemetry tests: the demo exporter binary, the specification,
free loopback ports. (Not a conftest.py: tests/python already has one of that name.)"""
import os
import pathlib
import socket

import pytest

REPO = pathlib.Path(__file__).resolve().parents[3]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))


@pytest.fixture(scope="session")
def demo_exporter() -> pathlib.Path:
    path = BUILD / "tests" / "unit" / "telemetry" / "telemetry-demo-exporter"
    if not path.exists():
        pytest.fail(f"{path} not built: run tools/setup (or cmake --build {BUILD} --target telemetry-demo-exporter)")
    return path


@pytest.fixture(scope="session")
def spec_path() -> pathlib.Path:
    # The specification's copy kept beside the registry (telemetry/spec/); the shared original,
    # where present, must be the same text.
    copy = REPO / "telemetry" / "spec" / "telemetry-reference.txt"
    shared = REPO.parent / "shared" / "spec" / "telemetry-reference.txt"
    if shared.exists():
        assert shared.read_text(encoding="utf-8") == copy.read_text(encoding="utf-8"), (
            f"{copy} differs from {shared}: copy the specification again")
    return copy


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
