"""Fixtures of the native engine's parity tests: tiny random models (tests/python/models.py)
and a runner for trainer-job's subcommands."""
from __future__ import annotations

import pathlib
import subprocess
import sys

import pytest

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))

import models  # noqa: E402  (tests/python/models.py)

# Llama 3.x rope scaling with a short original context, so the tiny head_dim has frequencies in
# every band of the llama3 rule (scaled, smoothed and kept).
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 64,
}

ARCHS = {
    "qwen3": dict(arch="qwen3", tokenizer="qwen3"),
    "qwen2": dict(arch="qwen2", tokenizer="qwen3"),
    "llama": dict(arch="llama", tokenizer="llama3", rope_parameters=LLAMA3_ROPE),
}


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory):
    """(arch, sharp=False) -> folder of a tiny random model, built once per session.

    sharp: weights drawn with std 0.3 instead of 0.02, so activations and logits are far from
    uniform and any numerical difference shows (the parity tests use these)."""
    cache = {}

    def get(arch: str, sharp: bool = False) -> pathlib.Path:
        key = (arch, sharp)
        if key not in cache:
            spec = dict(ARCHS[arch])
            if sharp:
                spec["initializer_range"] = 0.3
            cache[key] = models.make_tiny_model(tmp_path_factory.mktemp(arch), seed=1, **spec)
        return cache[key]

    return get


@pytest.fixture(scope="session")
def job(bin_dir):
    """Runs trainer-job with arguments; returns the CompletedProcess."""

    def run(*args, timeout=300, check=True, **kwargs):
        out = subprocess.run([str(bin_dir / "trainer-job"), *map(str, args)], capture_output=True, text=True,
                             timeout=timeout, **kwargs)
        if check and out.returncode != 0:
            raise AssertionError(f"trainer-job {' '.join(map(str, args))} exited {out.returncode}:\n{out.stderr}")
        return out

    return run
