"""A trainerd ready for reinforcement runs of the toy policy (tests/python/rl_toy.py): the policy
selected as a base model, `rows` toy tickets registered as a dataset, and a workload, all through
the CLI. The RL CLI test modules share it as their module fixture."""
from __future__ import annotations

import contextlib
import json
import sys

import pytest

from cli_support import Cli, start_trainerd, stop
from rl_toy import make_toy_policy, toy_rows


@contextlib.contextmanager
def toy_rl_service(bin_dir, tmp_path_factory, *, model: str, dataset: str, workload: str, rows: int = 32,
                   config: dict | None = None, reward_python: bool = False):
    """Yields (trainerd, cli). `config` adds to trainerd's configuration (judges, pools; its
    `baseModels` are declared beside the toy policy, not selected; outbound calls to 127.0.0.1
    allowed unless it says otherwise). With `reward_python`, trainerd
    (and so its jobs) runs Python scoring code with this interpreter."""
    folder = make_toy_policy(tmp_path_factory.mktemp("models") / model)
    config = dict(config or {})
    # The tests' evaluators listen on loopback: plans may call them (docs/security.md, "Outbound calls").
    full = {"outbound": {"allow": ["127.0.0.1:*"]}, **config,
            "baseModels": [{"name": model, "path": str(folder)}, *config.get("baseModels", [])]}
    with pytest.MonkeyPatch.context() as mp:
        if reward_python:
            mp.setenv("TRAINER_REWARD_PYTHON", sys.executable)  # trainerd's environment reaches its jobs
        daemon = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), full)
    try:
        cli = Cli(bin_dir / "trainer", daemon.url)
        data = tmp_path_factory.mktemp("data") / "toy.jsonl"
        data.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(rows)))
        cli("base-models", "select", model, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", data, "--name", dataset, check=True)
        cli("workloads", "create", workload, check=True)
        yield daemon, cli
    finally:
        stop(daemon.proc, daemon.data_dir)
