"""What the service benches share: a trainerd on a temp folder with the stand-in job (or several,
replicas on one PostgreSQL database), and a data folder filled with real run records through the
API. Used by open_loop.py and latency.py. Requests carry the local admin token each trainerd keeps
for its address (tests/python/auth.py), in a token file under the bench's own folder."""
import concurrent.futures
import json
import os
import pathlib
import signal
import subprocess
import sys
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("TRAINER_BUILD_DIR", REPO / "build"))
sys.path.insert(0, str(REPO / "tests" / "python"))
sys.path.insert(0, str(REPO / "tests" / "python" / "service"))


def use_token_file(tmp: pathlib.Path) -> None:
    """Points the token file (XDG_CONFIG_HOME, read by trainerd and by auth.py) under `tmp`, and
    makes urllib send the token kept for each address."""
    import auth
    os.environ["XDG_CONFIG_HOME"] = str(tmp / "config")
    auth.install()


def call(url, method="GET", body=None, timeout=60):
    req = urllib.request.Request(url, data=json.dumps(body).encode() if body is not None else None, method=method,
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout) as r:
        return json.loads(r.read())


def setup(tmp: pathlib.Path, store_url: str | None = None):
    """(config path, environment): the tiny model, one CPU pool, the stand-in job queued for an
    hour (so a run submitted behind it stays open); the state in the PostgreSQL database
    `store_url` when given, else in the data folder's SQLite."""
    use_token_file(tmp)
    from models import make_tiny_model
    model = make_tiny_model(tmp / "model", arch="qwen3", tokenizer="qwen3", seed=0)
    behaviour = tmp / "standin.json"
    behaviour.write_text(json.dumps({"queueSeconds": 3600}))
    config = tmp / "config.json"
    doc = {"baseModels": [{"name": "tiny/qwen3", "path": str(model)}],
           "pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}],
           "limits": {"cancelGraceSeconds": 1},
           "jobBinary": str(REPO / "tests" / "python" / "service" / "standin_job.py")}
    if store_url:
        doc["store"] = {"kind": "postgres", "url": store_url}
    config.write_text(json.dumps(doc))
    return config, dict(os.environ, TRAINER_STANDIN_FILE=str(behaviour))


class Daemon:
    """trainerd of `build` on `data`, ready. `name`: a replica's (its port file and --instance), for
    several on one database and data folder."""

    def __init__(self, build, data, config, env, log, name: str = ""):
        port_file = data.parent / (data.name + (f".{name}" if name else "") + ".port")
        if port_file.exists():
            port_file.unlink()
        self.proc = subprocess.Popen([str(pathlib.Path(build) / "apps" / "trainerd"), "--data-dir", str(data),
                                      "--port", "0", "--port-file", str(port_file), "--config", str(config),
                                      *(("--instance", name) if name else ())],
                                     stdout=log, stderr=log, env=env)
        while not port_file.exists() or not port_file.read_text().strip():
            if self.proc.poll() is not None:
                raise RuntimeError("trainerd exited")
            time.sleep(0.05)
        self.port = int(port_file.read_text().strip())
        self.url = f"http://127.0.0.1:{self.port}"
        while True:
            try:
                if call(self.url + "/v1/info")["startup"]["ready"]:
                    break
            except Exception:
                time.sleep(0.05)

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def fill(build, tmp, runs, env, config):
    """(data folder, run ids): `runs` runs submitted through the API while one run holds the only
    device, each then cancelled (real run records with phase history, events and claims)."""
    from service_helpers import CHAT_ROWS, jsonl, plan
    data = tmp / "filled"
    d = Daemon(build, data, config, env, open(tmp / "fill.log", "wb"))
    try:
        url = d.url
        call(url + "/v1/base-models/select", "POST", {"name": "tiny/qwen3"})
        while call(url + "/v1/base-models/tiny/qwen3")["status"] != "ready":
            time.sleep(0.05)
        call(url + "/v1/workloads", "POST", {"name": "bench"})
        call(url + "/v1/datasets", "POST", {"name": "train", "rows": jsonl(CHAT_ROWS)})
        holder = call(url + "/v1/runs", "POST", plan(workload="bench"))["runId"]
        started = time.time()

        def one(i):
            run = call(url + "/v1/runs", "POST", plan(workload="bench", description=f"bench run {i}"))
            call(url + f"/v1/runs/{run['runId']}/cancel", "POST")
            return run["runId"]

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            ids = list(pool.map(one, range(runs)))
        call(url + f"/v1/runs/{holder}/cancel", "POST")
        deadline = time.time() + 30
        while time.time() < deadline and call(url + f"/v1/runs/{holder}")["phase"] != "CANCELLED":
            time.sleep(0.2)
        print(f"filled {call(url + '/v1/runs?limit=1')['total']} runs in {time.time() - started:.0f}s", flush=True)
    finally:
        d.stop()
        from service_helpers import kill_jobs_under
        kill_jobs_under(data)
    return data, ids
