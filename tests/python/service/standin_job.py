#!/usr/bin/env python3
"""TEST-ONLY STAND-IN for `trainer-job run`, speaking the job protocol of docs/api.md.

It trains nothing. The service tests use it only for faults and timings a real job cannot be
made to produce on demand: a job that lingers before preparing (QUEUED) or while preparing, one
that trains slowly enough to cancel or to outlive a killed trainerd, one that ignores SIGTERM,
one that dies without reporting an outcome. Runs that must really train use build/apps/trainer-job.

Behaviour comes from the JSON file named by $TRAINER_STANDIN_FILE, read when the job starts:
  queueSeconds    sleep before the first event (the run stays QUEUED)
  prepareSeconds  time spent in PREPARING
  steps           steps to report (default 3)
  stepSeconds     time per step
  ignoreTerm      ignore SIGTERM (trainerd must SIGKILL it after the grace period)
  exitCode        exit with this code after the steps, reporting no outcome
  failReason      report {"type":"failed"} with this reason, exit 1
  envFile         write the TRAINER_* environment variables it was given to this file (JSON)
  pauseDelay      on SIGUSR1 (a pause with --checkpoint save), seconds before it saves
  pauseFail       on SIGUSR1, report {"type":"failed"} with this reason instead of saving

On SIGUSR1 it publishes a snapshot of both kinds at its current step through the real catalog
($TRAINER_CATALOG_URL, as its attempt: X-Trainer-Job $TRAINER_JOB_ID, Authorization: Bearer
$TRAINER_JOB_TOKEN) into $TRAINER_ARTIFACT_ROOT as docs/job-protocol.md describes (retrying an
unreachable trainerd for a minute), writes `paused` and exits 0. A resumed attempt
($TRAINER_RESUME_SNAPSHOT) continues after the snapshot's saved step.
"""
import hashlib
import urllib.error
import urllib.request
import json
import os
import signal
import sys
import time


def main() -> int:
    args = sys.argv[1:]
    if not args or args[0] != "run":
        print("standin_job: only 'run' is supported", file=sys.stderr)
        return 2
    opts = dict(zip(args[1::2], args[2::2]))
    plan = json.load(open(opts["--plan"]))
    out_dir = opts["--output"]
    events = open(opts["--events"], "a", buffering=1)
    behaviour = {}
    path = os.environ.get("TRAINER_STANDIN_FILE")
    if path and os.path.exists(path):
        behaviour = json.load(open(path))

    if behaviour.get("envFile"):
        with open(behaviour["envFile"], "w") as f:
            json.dump({k: v for k, v in os.environ.items() if k.startswith("TRAINER_")}, f)

    stop = {"requested": False, "pause": False}
    signal.signal(signal.SIGUSR1, lambda *_: stop.update(pause=True))
    if behaviour.get("ignoreTerm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))

    def emit(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    catalog = os.environ.get("TRAINER_CATALOG_URL", "")
    credentials = {"X-Trainer-Job": os.environ.get("TRAINER_JOB_ID", ""),
                   "Authorization": "Bearer " + os.environ.get("TRAINER_JOB_TOKEN", "")}
    state = {"step": 0}

    def call(method, path, body=None):
        deadline = time.time() + 60
        while True:
            req = urllib.request.Request(catalog + path, method=method,
                                         data=json.dumps(body).encode() if body is not None else None,
                                         headers={"Content-Type": "application/json", **credentials})
            try:
                with urllib.request.urlopen(req, timeout=10) as r:
                    return json.load(r)
            except urllib.error.HTTPError as e:
                if e.code < 500 or time.time() > deadline:
                    raise
            except (urllib.error.URLError, ConnectionError):
                if time.time() > deadline:
                    raise
            time.sleep(0.2)

    def publish(step):
        run_id = os.environ["TRAINER_RUN_ID"]
        payloads = {"weights": {"adapter_model.safetensors": f"standin weights {step}".encode()},
                    "trainingState": {"state.json": json.dumps({"step": step}).encode()}}
        manifests = {}
        for kind, files in payloads.items():
            manifest = {"format": 1, "kind": kind, "runId": run_id, "engineStep": step, "epoch": 0,
                        "baseModelSha": "", "files": [{"path": name, "bytes": len(data),
                                                       "sha256": hashlib.sha256(data).hexdigest()}
                                                      for name, data in sorted(files.items())]}
            manifests[kind] = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
        digests = {k: hashlib.sha256(m).hexdigest() for k, m in manifests.items()}
        text = f"trainer-snapshot-v1\n{run_id}\n{step}\n" + "".join(f"{k}={d}\n" for k, d in sorted(digests.items()))
        sid = hashlib.sha256(text.encode()).hexdigest()
        call("POST", f"/v1/runs/{run_id}/snapshots",
             {"snapshotId": sid, "attempt": int(os.environ.get("TRAINER_ATTEMPT", "1")), "step": step, "epoch": 0,
              "kinds": {k: {"manifestDigest": digests[k], "bytes": sum(len(d) for d in payloads[k].values())}
                        for k in payloads}})
        for kind, files in payloads.items():
            folder = os.path.join(os.environ["TRAINER_ARTIFACT_ROOT"], "snapshots", sid, kind)
            if not os.path.isdir(folder):
                tmp = folder + ".tmp"
                os.makedirs(tmp, exist_ok=True)
                for name, data in files.items():
                    open(os.path.join(tmp, name), "wb").write(data)
                open(os.path.join(tmp, "manifest.json"), "wb").write(manifests[kind])
                os.rename(tmp, folder)
            call("POST", f"/v1/snapshots/{sid}/commit", {"kind": kind})
        return sid

    def sleep(seconds):
        end = time.time() + seconds
        while time.time() < end:
            if stop["requested"]:
                emit(type="cancelled")
                sys.exit(143)
            if stop["pause"]:
                time.sleep(behaviour.get("pauseDelay", 0))
                if behaviour.get("pauseFail"):
                    emit(type="failed", reason=behaviour["pauseFail"])
                    sys.exit(1)
                sid = publish(state["step"])
                emit(type="paused", step=state["step"], snapshotId=sid)
                sys.exit(0)
            time.sleep(0.02)

    print(f"standin_job: plan {plan.get('workload')} base {plan.get('baseModel')}", file=sys.stderr)
    sleep(behaviour.get("queueSeconds", 0))
    emit(type="phase", phase="PREPARING")
    emit(type="preparing", rowsDone=0, rowsTotal=4)
    sleep(behaviour.get("prepareSeconds", 0.1))
    emit(type="preparing", rowsDone=4, rowsTotal=4)
    emit(type="resolved", config=plan.get("config", {}), settingsSha="standin")
    emit(type="phase", phase="TRAINING")
    steps = int(behaviour.get("steps", 3))
    first = 1
    if os.environ.get("TRAINER_RESUME_SNAPSHOT"):
        first = call("GET", "/v1/snapshots/" + os.environ["TRAINER_RESUME_SNAPSHOT"])["savedStep"] + 1
    for step in range(first, steps + 1):
        sleep(behaviour.get("stepSeconds", 0.05))
        state["step"] = step
        emit(type="step", step=step, totalSteps=steps, loss=2.0 / step, learningRate=1e-4, gradNorm=1.0,
             tokenAccuracy=0.5, tokensPerSecond=1000.0, batchTokens=64, stepSeconds=0.05)
    if "exitCode" in behaviour:
        print("standin_job: exiting without an outcome", file=sys.stderr)
        return int(behaviour["exitCode"])
    if behaviour.get("failReason"):
        emit(type="failed", reason=behaviour["failReason"])
        return 1
    adapter = os.path.join(out_dir, "adapter")
    os.makedirs(adapter, exist_ok=True)
    with open(os.path.join(adapter, "adapter_config.json"), "w") as f:
        json.dump({"standin": True}, f)
    emit(type="completed", adapterDir=adapter, finalLoss=2.0 / steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
