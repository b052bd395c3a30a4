"""A real PostgreSQL server for the tests (Debian's postgresql-15, started by tools/test-postgres:
an unprivileged user, initdb into a temporary folder, a free loopback port). Started once per test
session by the `postgres_server` fixture (tests/python/conftest.py); each user makes a database of
its own with create_database(). If the server cannot start, the tests that need it fail, never
skip."""
from __future__ import annotations

import dataclasses
import itertools
import os
import pathlib
import subprocess

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "tools" / "test-postgres"
_made = itertools.count()


@dataclasses.dataclass
class PostgresServer:
    url: str               # a superuser's URL, postgresql://pg@127.0.0.1:PORT/postgres
    state: pathlib.Path    # tools/test-postgres's state folder

    def database_url(self, name: str) -> str:
        return self.url.rsplit("/", 1)[0] + "/" + name

    def psql(self, database: str, sql: str, **variables: str) -> str:
        """Runs `sql` (psql's variables :'NAME' interpolated from `variables`) in `database`;
        its unaligned output."""
        argv = ["psql", self.database_url(database), "-X", "-At", "-v", "ON_ERROR_STOP=1"]
        for key, value in variables.items():
            argv += ["-v", f"{key}={value}"]
        out = subprocess.run(argv, input=sql, capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise AssertionError(f"psql failed ({out.returncode}): {out.stderr}\n{sql}")
        return out.stdout.strip()


def start_postgres_server(state: pathlib.Path) -> PostgresServer:
    out = subprocess.run([str(SCRIPT), "start", str(state)], capture_output=True, text=True, timeout=180)
    if out.returncode != 0:
        pytest.fail(f"PostgreSQL did not start (tools/test-postgres start):\n{out.stderr[-4000:]}")
    return PostgresServer(url=out.stdout.strip().splitlines()[-1], state=state)


def stop_postgres_server(server: PostgresServer) -> None:
    subprocess.run([str(SCRIPT), "stop", str(server.state)], capture_output=True, text=True, timeout=120)


def create_database(server: PostgresServer, prefix: str) -> str:
    """A new empty database; returns its URL."""
    name = f"{prefix}_{os.getpid()}_{next(_made)}"
    server.psql("postgres", f"CREATE DATABASE {name};")
    return server.database_url(name)
