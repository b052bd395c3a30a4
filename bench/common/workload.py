"""Workload pieces the CPU benchmarks share: where trainer-job is, a child's thread settings, and
the random Qwen3-architecture model (the real Qwen3 tokenizer and its 151k vocabulary)."""
from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tests" / "python"))


def trainer_job() -> pathlib.Path:
    """trainer-job of $TRAINER_BUILD_DIR (default: build/ of this checkout)."""
    build = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
    job = build / "apps" / "trainer-job"
    if not job.is_file():
        raise SystemExit(f"no trainer-job at {job}: build it or set TRAINER_BUILD_DIR")
    return job


@contextlib.contextmanager
def work_folder(given: str | None, prefix: str):
    """The folder `given` (made if missing, kept afterwards), or a temporary folder that is removed
    when the benchmark ends."""
    if given:
        path = pathlib.Path(given)
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    path = pathlib.Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def work_argument(ap) -> None:
    """--work on an argparse parser: where the model, data and outputs go."""
    ap.add_argument("--work", default=None,
                    help="folder for the model, data and outputs, kept afterwards (default: a temporary folder, removed)")


def thread_env(threads: int) -> dict:
    """The environment of a child that must use `threads` threads (OpenMP and MKL alike)."""
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                TOKENIZERS_PARALLELISM="false")


def qwen3_model(folder: pathlib.Path, hidden: int, layers: int, heads: int, kv_heads: int,
                head_dim: int) -> pathlib.Path:
    """A random Qwen3-architecture model (fp32, intermediate 3 x hidden) in folder, made once."""
    import models

    if (folder / "config.json").exists():
        return folder
    return models.make_tiny_model(folder, arch="qwen3", tokenizer="qwen3", seed=0, hidden_size=hidden,
                                  intermediate_size=3 * hidden, num_hidden_layers=layers,
                                  num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=head_dim)


def rl_shape(hidden: int) -> dict:
    """The generation and GRPO benchmarks' attention shape: head_dim 64, hidden / 64 heads,
    hidden / 128 key/value heads (hidden: a multiple of 128, else SystemExit)."""
    if hidden < 128 or hidden % 128:
        raise SystemExit(f"--hidden must be a multiple of 128, not {hidden}")
    return dict(heads=hidden // 64, kv_heads=hidden // 128, head_dim=64)
