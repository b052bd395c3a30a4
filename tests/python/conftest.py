"""Shared fixtures for the Python-side tests (parity, peers, end-to-end).

Paths to the built binaries and the repository come from here, so a test never guesses.
"""
import atexit
import os
import pathlib
import shutil
import tempfile

import pytest

import auth
import suite_times
from pg_server import start_postgres_server, stop_postgres_server
from s3_server import start_s3_server, stop_s3_server

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))

# API tokens (docs/security.md): every trainerd a test starts writes its local admin token into the
# token file under XDG_CONFIG_HOME, which the `trainer` binary reads; a folder of this session's own
# keeps the user's file out of it. urllib requests send the token kept for their address (auth.py).
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="trainer-test-config-")
atexit.register(shutil.rmtree, os.environ["XDG_CONFIG_HOME"], True)
auth.install()


def pytest_configure(config):
    suite_times.register(config)


@pytest.fixture(scope="session")
def repo() -> pathlib.Path:
    return REPO


@pytest.fixture(scope="session")
def bin_dir() -> pathlib.Path:
    path = BUILD / "apps"
    if not (path / "trainer-job").exists():
        pytest.fail(f"built binaries not found in {path}: run tools/setup first")
    return path


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    """One real S3-compatible server (SeaweedFS's weed on loopback) for the whole session: each
    user keeps to a bucket or prefix of its own."""
    server = start_s3_server(tmp_path_factory.mktemp("weed"))
    yield server
    stop_s3_server(server.proc)


@pytest.fixture(scope="session")
def postgres_server(tmp_path_factory):
    """One real PostgreSQL server (tools/test-postgres) for the whole session: each user makes a
    database of its own (pg_server.create_database)."""
    server = start_postgres_server(tmp_path_factory.mktemp("postgres"))
    yield server
    stop_postgres_server(server)
