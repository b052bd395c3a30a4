"""The trainer CLI end to end: the real `trainer` binary against a real trainerd."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time

import pytest

from cli_support import (DATASET_NAME, MODEL_NAME, TERMINAL, WORKLOAD, Cli, cancel_run, kill_job_of, plan_text, prepare,
                         start_run, start_trainerd, stop, wait_for)

LONG_RUN_STEPS = 100000


# ---- against trainerd ----------------------------------------------------------------------

def test_info_reports_a_ready_service(cli, trainerd):
    out = cli("info")
    assert out.returncode == 0, out.stderr
    assert trainerd.url in out.stdout and "Ready:" in out.stdout
    info = cli.json("info")
    assert info["startup"]["ready"] is True


def test_dry_run_show_resolved_prints_every_default(ready):
    out = ready("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=plan_text())
    assert out.returncode == 0, out.stderr
    for field in ("rank:", "alpha:", "dropout:", "targetModules:", "learningRate:", "weightDecay:",
                  "beta1:", "beta2:", "epsilon:", "maxGradNorm:", "schedule:", "warmupSteps:",
                  "warmupRatio:", "epochs:", "maxSteps:", "batchSize:", "gradientAccumulation:",
                  "validationFrequencySteps:", "validationSplit:", "packing:", "seed:", "maxSeqLength:",
                  "precision:", "gpus:", "keepAdapters:", "maxAttempts: 3", "method: sft"):
        assert field in out.stdout, f"{field} missing from\n{out.stdout}"
    resolved = ready.json("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=plan_text())
    plan = resolved["plan"]
    assert plan["config"]["hyperparams"]["optimizer"]["beta2"] == 0.999
    assert plan["execution"]["keepAdapters"] == 4
    assert plan["execution"]["maxAttempts"] == 3
    # A dry run starts nothing.
    assert all(r["phase"] for r in ready.json("runs", "list")["runs"]) is not None


def test_the_service_checks_what_only_it_can_know(ready):
    out = ready("runs", "start", "-f", "-", "--dry-run", input=plan_text().replace(WORKLOAD, "no-such-workload"))
    assert out.returncode == 1
    assert "no-such-workload" in out.stderr


def test_start_without_a_terminal_and_without_force_refuses(ready):
    out = ready("runs", "start", "-f", "-", input=plan_text())
    assert out.returncode == 2
    assert "pass --force" in out.stderr
    assert ready.json("runs", "list")["runs"] == [] or all(
        r.get("description") != "never" for r in ready.json("runs", "list")["runs"])


def test_a_resubmission_with_the_same_submission_id_reaches_the_same_run(ready):
    plan = plan_text(max_steps=LONG_RUN_STEPS, submissionId="resubmit-me-1")
    first = start_run(ready, plan)
    second = start_run(ready, plan)
    assert first["runId"] == second["runId"]
    assert first["submissionId"] == "resubmit-me-1"
    text = ready("runs", "start", "-f", "-", "--force", input=plan)
    assert "already accepted" in text.stdout and first["runId"] in text.stdout
    cancel_run(ready, first["runId"], wait=False)


def test_a_generated_submission_id_makes_each_start_a_new_run(ready):
    a = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    b = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    assert a["runId"] != b["runId"]
    assert re.fullmatch(r"[0-9a-f]{16}", a["submissionId"])
    cancel_run(ready, a["runId"], wait=False)
    cancel_run(ready, b["runId"], wait=False)


def test_wait_timeout_stops_watching_and_leaves_the_run_running(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    began = time.time()
    out = ready("runs", "wait", run["runId"], "--timeout", "2s")
    assert out.returncode == 5
    assert time.time() - began < 30
    assert "stopped waiting after" in out.stderr and "still" in out.stderr
    assert ready.json("runs", "get", run["runId"])["phase"] not in TERMINAL
    cancel_run(ready, run["runId"], wait=False)


def test_cancel_asks_first_and_wait_exit_status_reports_cancelled(ready):
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    refused = ready("runs", "cancel", run["runId"])
    assert refused.returncode == 2 and "pass --force" in refused.stderr
    ok = ready("runs", "cancel", run["runId"][:10], "--force")
    assert ok.returncode == 0, ok.stderr
    assert "Cancel requested" in ok.stdout
    plain = ready("runs", "wait", run["runId"], timeout=120)
    assert plain.returncode == 0, plain.stderr
    assert "CANCELLED" in plain.stdout
    strict = ready("runs", "wait", run["runId"], "--exit-status")
    assert strict.returncode == 4


def test_wait_exit_status_reports_failed(ready):
    # Its job is killed from outside (as the OOM killer would): the run fails.
    run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS, max_attempts=1))
    kill_job_of(run["runId"])
    plain = ready("runs", "wait", run["runId"], timeout=180)
    assert plain.returncode == 0, plain.stderr
    assert "FAILED" in plain.stdout
    strict = ready("runs", "wait", run["runId"], "--exit-status")
    assert strict.returncode == 3
    detail = ready("runs", "get", run["runId"])
    assert "Failure:" in detail.stdout


def test_id_prefixes_resolve_and_ambiguous_ones_are_refused(ready):
    by_first_char = {}
    runs = []
    while True:
        run = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
        runs.append(run["runId"])
        cancel_run(ready, run["runId"], wait=False)
        if run["runId"][0] in by_first_char:
            pair = (by_first_char[run["runId"][0]], run["runId"])
            break
        by_first_char[run["runId"][0]] = run["runId"]
    a, b = pair
    common = os.path.commonprefix([a, b])
    out = ready("runs", "get", common)
    assert out.returncode == 1
    assert a[:8] in out.stderr and b[:8] in out.stderr, out.stderr
    # The shortest prefix of a that no other run of this service shares (the module's other tests
    # made runs too, and one of theirs may share a longer prefix with a than b does).
    others = [r["runId"] for r in ready.json("runs", "list", "--limit", "1000")["runs"] if r["runId"] != a]
    unique = next(a[:n] for n in range(len(common) + 1, len(a) + 1) if not any(o.startswith(a[:n]) for o in others))
    assert ready.json("runs", "get", unique)["runId"] == a
    assert ready.json("runs", "get", a)["runId"] == a


def test_lists_are_newest_first_and_page_with_limit_and_offset(ready):
    first = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    second = start_run(ready, plan_text(max_steps=LONG_RUN_STEPS))
    page = ready.json("runs", "list", "--limit", "1")
    assert page["runs"][0]["runId"] == second["runId"]
    assert page["nextOffset"] == 1
    text = ready("runs", "list", "--limit", "1")
    assert "More runs: --offset 1" in text.stdout
    assert second["runId"][:12] in text.stdout
    assert ready.json("runs", "list", "--limit", "1", "--offset", "1")["runs"][0]["runId"] == first["runId"]
    open_runs = ready.json("runs", "list", "--phase", "open")["runs"]
    assert {first["runId"], second["runId"]} <= {r["runId"] for r in open_runs}
    assert all(r["phase"] not in TERMINAL for r in open_runs)
    cancel_run(ready, first["runId"], wait=False)
    cancel_run(ready, second["runId"], wait=False)
    wait_for(lambda: ready.json("runs", "get", second["runId"])["phase"] in TERMINAL, timeout=60, what="cancel")
    cancelled = ready.json("runs", "list", "--phase", "CANCELLED")["runs"]
    assert second["runId"] in {r["runId"] for r in cancelled}


def test_json_outputs_parse(ready):
    for args in (["info"], ["base-models", "list"], ["base-models", "list", "--all"],
                 ["base-models", "get", MODEL_NAME], ["datasets", "list"], ["datasets", "get", DATASET_NAME],
                 ["workloads", "list"], ["workloads", "get", WORKLOAD], ["runs", "list"], ["capacity"]):
        out = ready(*args, "-o", "json")
        assert out.returncode == 0, (args, out.stderr)
        json.loads(out.stdout)
        compact = ready(*args, "-o", "json-compact")
        assert compact.returncode == 0 and compact.stdout.count("\n") == 1, args


def test_workload_commands(ready):
    ready("workloads", "create", "renamable", "--description", "first", check=True)
    ready("workloads", "rename", "renamable", "renamed", check=True)
    ready("workloads", "annotate", "renamed", "--description", "second", check=True)
    ready("workloads", "set-evaluation", "renamed", "--dataset", DATASET_NAME, check=True)
    w = ready.json("workloads", "get", "renamed")
    assert w["name"] == "renamed" and w["description"] == "second"
    assert ready("workloads", "get", "renamable").returncode == 1
    listed = ready("workloads", "list")
    assert "renamed" in listed.stdout and "NAME" in listed.stdout


def test_the_demo_steps_in_short(ready, tmp_path):
    """What tools/demo does, with a few steps: measure, start --wait, metrics, hparams, capacity."""
    measure = ready("datasets", "measure", DATASET_NAME, "--base-model", MODEL_NAME, "--max-seq-length", "128")
    assert measure.returncode == 0, measure.stderr
    assert "Rows:" in measure.stdout and "240" in measure.stdout
    plan = tmp_path / "run.yaml"
    plan.write_text(plan_text(max_steps=4, description="demo in short", configName="ci"))
    out = ready("runs", "start", "-f", plan, "--force", "--wait", "--exit-status", timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Started run" in out.stdout
    assert re.search(r"Run [0-9a-f]+ COMPLETED after 4/4 steps", out.stdout), out.stdout
    assert "adapter:" in out.stdout and "final loss:" in out.stdout
    assert "TRAINING" in out.stdout and "step 4/4" in out.stdout
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    run = ready.json("runs", "get", run_id)
    assert run["phase"] == "COMPLETED" and os.path.isdir(run["adapterPath"])
    metrics = ready("runs", "metrics", run_id[:8])
    assert metrics.returncode == 0 and metrics.stdout.startswith("STEP")
    assert len(metrics.stdout.strip().splitlines()) == 1 + 4
    assert len(ready.json("runs", "metrics", run_id, "--limit", "2")["steps"]) == 2
    extra = ready("runs", "metrics", run_id, "--fields", "batchTokens")
    assert "BATCHTOKENS" in extra.stdout
    hparams = ready.json("runs", "hparams", run_id)
    assert hparams["hparams"]["config.hyperparams.training.maxSteps"] == 4
    detail = ready("runs", "get", run_id)
    assert "COMPLETED" in detail.stdout and "Adapter:" in detail.stdout and "CPU time:" in detail.stdout
    assert ready("capacity").returncode == 0
    annotated = ready("runs", "annotate", run_id, "--description", "", "--config-name", "renamed")
    assert annotated.returncode == 0, annotated.stderr
    assert ready.json("runs", "get", run_id)["configName"] == "renamed"
    # -o json on wait: line-delimited events, a terminal event, then the record.
    lines = ready("runs", "wait", run_id, "-o", "json-compact").stdout.strip().splitlines()
    docs = [json.loads(line) for line in lines]
    assert docs[-2]["type"] == "terminal" and docs[-2]["phase"] == "COMPLETED"
    assert docs[-1]["runId"] == run_id


@pytest.mark.timeout(1200)  # tools/demo is given up to 900 s
def test_tools_demo_runs_in_short(repo, bin_dir, tmp_path):
    """tools/demo itself, with 3 steps, against its own trainerd."""
    env = dict(os.environ, TRAINER_DEMO_DIR=str(tmp_path / "demo"), TRAINER_DEMO_STEPS="3",
               TRAINER_DEMO_SKIP_SETUP="1", TRAINER_BUILD_DIR=str(bin_dir.parent))
    env.pop("TRAINER_URL", None)
    out = subprocess.run([str(repo / "tools" / "demo")], capture_output=True, text=True, env=env,
                         timeout=900, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-4000:]
    assert re.search(r"COMPLETED after 3/3 steps", out.stdout), out.stdout[-4000:]
    assert "adapter (PEFT format): /" in out.stdout
    # The run's adapter was registered and became the workload's candidate.
    assert re.search(r"Moved candidate of workload sentiment-demo to model [0-9a-f]{16} \(ADAPTER on tiny-qwen3, at file://",
                     out.stdout), out.stdout[-4000:]


def test_wait_rides_out_a_restart_of_the_service(bin_dir, tiny_model, tmp_path):
    """A dropped connection is retried: trainerd is killed and restarted under `runs wait`."""
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    service = start_trainerd(bin_dir, tmp_path / "svc", config)
    waiter = None
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        prepare(cli)
        run = start_run(cli, plan_text(max_steps=LONG_RUN_STEPS))
        waited = tmp_path / "wait.out"
        with open(waited, "w") as out:
            waiter = subprocess.Popen([str(bin_dir / "trainer"), "runs", "wait", run["runId"], "--exit-status",
                                       "--trainer-url", service.url],
                                      stdout=out, stderr=subprocess.STDOUT, text=True, stdin=subprocess.DEVNULL)
        wait_for(lambda: waited.read_text(), timeout=60, what="runs wait to show the run")
        port = int(service.url.rsplit(":", 1)[1])
        os.kill(service.proc.pid, signal.SIGKILL)  # trainerd alone: its job carries on
        service.proc.wait(timeout=10)
        wait_for(lambda: "lost; retry 1 of 8" in waited.read_text(), timeout=60, what="runs wait to lose trainerd")
        service = start_trainerd(bin_dir, tmp_path / "svc", config, port=port)
        cancelled = cli("runs", "cancel", run["runId"], "--force")
        assert cancelled.returncode == 0, cancelled.stderr
        waiter.wait(timeout=180)
        output = waited.read_text()
        assert waiter.returncode == 4, output
        assert "lost; retry 1 of 8" in output
        assert "CANCELLED" in output
    finally:
        if waiter and waiter.poll() is None:
            waiter.kill()
        stop(service.proc, service.data_dir)


def answer_on_a_terminal(cli, answer: str, *args):
    """Runs `trainer ARGS` with a pseudo-terminal on stdin, typing `answer` at the prompt."""
    master, slave = os.openpty()
    try:
        proc = subprocess.Popen([str(cli.binary), *map(str, args), "--trainer-url", cli.url], stdin=slave,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        os.close(slave)
        slave = None
        os.write(master, answer.encode() + b"\n")
        out, err = proc.communicate(timeout=60)
        return proc.returncode, out, err
    finally:
        os.close(master)
        if slave is not None:
            os.close(slave)


def test_start_and_cancel_ask_on_a_terminal(ready, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(plan_text(max_steps=LONG_RUN_STEPS, description="asked"))
    before = len(ready.json("runs", "list", "--limit", "100")["runs"])
    rc, out, err = answer_on_a_terminal(ready, "n", "runs", "start", "-f", plan)
    assert rc == 1 and "Start the SFT run of workload cli-tests on tiny-qwen3" in err and "not started" in err
    assert len(ready.json("runs", "list", "--limit", "100")["runs"]) == before
    rc, out, err = answer_on_a_terminal(ready, "y", "runs", "start", "-f", plan)
    assert rc == 0, err
    run_id = re.search(r"Started run ([0-9a-f]+)", out).group(1)
    rc, out, err = answer_on_a_terminal(ready, "y", "runs", "cancel", run_id)
    assert rc == 0 and f"Cancel run {run_id}" in err, err
    assert "Cancel requested" in out
