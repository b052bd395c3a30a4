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
"""
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

    stop = {"requested": False}
    if behaviour.get("ignoreTerm"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    else:
        signal.signal(signal.SIGTERM, lambda *_: stop.update(requested=True))

    def emit(**event):
        events.write(json.dumps(event) + "\n")
        events.flush()

    def sleep(seconds):
        end = time.time() + seconds
        while time.time() < end:
            if stop["requested"]:
                emit(type="cancelled")
                sys.exit(143)
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
    for step in range(1, steps + 1):
        sleep(behaviour.get("stepSeconds", 0.05))
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
