"""Starting and stopping `trainer-job serve` for the serving tests."""
from __future__ import annotations

import json
import os
import subprocess
import threading

ADAPTERS = {"alpha": 1, "beta": 2}  # name -> the seed of its random matrices


class Served:
    def __init__(self, proc, port, base_name):
        self.proc, self.port, self.base_name = proc, port, base_name
        self.url = f"http://127.0.0.1:{port}"
        self.stderr = []


def start_serve(bin_dir, served_models, *extra, env=None):
    """`trainer-job serve` on a free loopback port with the base model and ADAPTERS; `env`: more
    environment variables (TRAINER_SERVE_SECRET)."""
    args = [str(bin_dir / "trainer-job"), "serve", "--model", str(served_models["base"]), "--port", "0"]
    for name in ADAPTERS:
        args += ["--adapter", f"{name}={served_models[name]}"]
    args += [str(a) for a in extra]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env} if env else None)
    line = proc.stdout.readline()
    if not line:
        proc.wait(timeout=30)
        raise AssertionError(f"trainer-job serve exited {proc.returncode}:\n{proc.stderr.read()}")
    hello = json.loads(line)
    assert hello["event"] == "listening"
    served = Served(proc, hello["port"], hello["models"][0])
    served.hello = hello
    # Drain stderr so a chatty server never blocks on a full pipe.
    threading.Thread(target=lambda: served.stderr.extend(proc.stderr), daemon=True).start()
    return served


def stop_serve(served):
    served.proc.terminate()
    try:
        served.proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        served.proc.kill()
        served.proc.wait()
