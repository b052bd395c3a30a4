"""Fixtures of the storage tests: one real S3-compatible server for the session."""
from __future__ import annotations

import pytest

from s3_server import start_s3_server, stop_s3_server


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory):
    server = start_s3_server(tmp_path_factory.mktemp("weed"))
    yield server
    stop_s3_server(server.proc)
