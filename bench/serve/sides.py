"""The three servers bench/serve compares, each started as its own process group and stopped by
that group's id (vLLM spawns an engine and a worker process; nothing else is touched).

- ours: `trainer-job serve` (prints its port once listening)
- hf:   bench/serve/hf_server.py under .venv's python (prints its port once listening)
- vllm: `python -m vllm.entrypoints.openai.api_server` under .venv-vllm's python, ready when
        `GET /health` answers 200
"""
from __future__ import annotations

import json
import os
import pathlib
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request

HERE = pathlib.Path(__file__).resolve().parent
SIDES = ("ours", "hf", "vllm")
# vLLM's docs recommend preloading tcmalloc on the CPU; used when the system has it.
TCMALLOC = ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", "/usr/lib/x86_64-linux-gnu/libtcmalloc.so.4")
LABELS = {"ours": "trainer-job serve", "hf": "transformers generate", "vllm": "vLLM CPU"}


class Running:
    def __init__(self, side, proc, port, log):
        self.side, self.proc, self.port, self.log = side, proc, port, log
        self.started_s = 0.0

    def tail(self, n=30):
        try:
            return "\n".join(pathlib.Path(self.log).read_text(errors="replace").splitlines()[-n:])
        except OSError:
            return ""


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _env(threads):
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads),
                TOKENIZERS_PARALLELISM="false")


def _popen(args, env, log, stdout=None):
    err = open(log, "w")
    return subprocess.Popen([str(a) for a in args], env=env, stdout=stdout or err, stderr=err, text=True,
                            start_new_session=True)


def _await_hello(proc, run, timeout):
    """Reads the JSON `listening` line of ours / hf from stdout (other lines are skipped)."""
    box = {}

    def reader():
        for line in proc.stdout:
            if line.startswith("{") and '"listening"' in line:
                box["hello"] = json.loads(line)
                break
        for _ in proc.stdout:  # keep draining
            pass

    threading.Thread(target=reader, daemon=True).start()
    deadline = time.time() + timeout
    while "hello" not in box:
        if proc.poll() is not None or time.time() > deadline:
            stop(run)
            raise RuntimeError(f"{run.side} did not start (exit {proc.returncode}):\n{run.tail()}")
        time.sleep(0.1)
    return box["hello"]["port"]


def _await_health(run, timeout):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if run.proc.poll() is not None:
            break
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{run.port}/health", timeout=5) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    stop(run)
    raise RuntimeError(f"{run.side} did not answer /health within {timeout}s (exit {run.proc.returncode}):\n{run.tail()}")


def start(side, cfg):
    """Starts `side`; cfg: job, model, adapters {name: dir}, threads, max_len, max_batch, vllm_python, logs."""
    t0 = time.time()
    log = os.path.join(cfg["logs"], f"{side}-{time.strftime('%H%M%S')}.log")
    env = _env(cfg["threads"])
    adapters = cfg["adapters"]
    if side in ("ours", "hf"):
        if side == "ours":
            args = [cfg["job"], "serve", "--context-limit", cfg["max_len"]]
        else:
            args = [sys.executable, HERE / "hf_server.py", "--threads", cfg["threads"]]
        args += ["--model", cfg["model"], "--name", "base", "--port", 0, "--max-batch", cfg["max_batch"]]
        args += [a for name, path in adapters.items() for a in ("--adapter", f"{name}={path}")]
        proc = _popen(args, env, log, stdout=subprocess.PIPE)
        run = Running(side, proc, None, log)
        run.port = _await_hello(proc, run, 300)
    elif side == "vllm":
        py = pathlib.Path(cfg["vllm_python"])
        venv = py.parent.parent
        port = _free_port()
        preload = [str(venv / "lib" / "libiomp5.so")] + [t for t in TCMALLOC if os.path.exists(t)][:1]
        env.update(VLLM_TARGET_DEVICE="cpu", VLLM_CPU_KVCACHE_SPACE="2", VLLM_CPU_OMP_THREADS_BIND=f"0-{cfg['threads'] - 1}",
                   LD_PRELOAD=" ".join(preload), VLLM_LOGGING_LEVEL="WARNING")
        args = [py, "-m", "vllm.entrypoints.openai.api_server", "--model", cfg["model"], "--served-model-name", "base",
                "--dtype", "float32", "--max-model-len", cfg["max_len"], "--max-num-seqs", cfg["max_batch"],
                "--enable-lora", "--max-loras", max(1, len(adapters)), "--max-lora-rank", cfg["rank"],
                "--host", "127.0.0.1", "--port", port, "--disable-uvicorn-access-log", "--disable-log-stats"]
        if adapters:
            args += ["--lora-modules"] + [f"{name}={path}" for name, path in adapters.items()]
        proc = _popen(args, env, log)
        run = Running(side, proc, port, log)
        _await_health(run, 600)
    else:
        raise ValueError(side)
    run.started_s = round(time.time() - t0, 1)
    return run


def stop(run):
    """SIGTERM to the side's own process group, SIGKILL after 30 s."""
    if run.proc.poll() is None:
        try:
            os.killpg(run.proc.pid, signal.SIGTERM)
            run.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(run.proc.pid, signal.SIGKILL)
            run.proc.wait()
        except ProcessLookupError:
            pass
    # Children of vLLM that outlived their parent: the group is gone once empty.
    try:
        os.killpg(run.proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
