"""A new user's second hour (issue 30, "the rest of what the review found"), through the real
`trainer` against a real trainerd: Ctrl-C on an evaluation's wait says the evaluation carries on
and what to run next; an unknown model to evaluate ends with the commands that list what can be
evaluated; evaluations show their dataset by name and short hash; `evaluations get --follow`
follows one to its end; `datasets name` moves a name without an upload; `runs list` shows an RL
run's reward, labelled, where an SFT run shows its loss."""
from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from models import make_tiny_model
from toy_rl_service import toy_rl_service

MODEL = "toy-policy"
RAW_MODEL = "raw-qwen3"
DATASET = "toy-tickets"
WORKLOAD = "second-hour"
EVALUABLE = ("What can be evaluated: `trainer trained-models list`, `trainer runs list --phase COMPLETED`, "
             "`trainer base-models list`")


class HeldEvaluator:
    """An http: evaluator that answers no call until released: an evaluation grading through it
    cannot end while a test watches it."""

    def __init__(self):
        self.released = threading.Event()
        held = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                held.released.wait(timeout=600)
                data = json.dumps({"score": 1}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.grader = f"http:http://127.0.0.1:{self.server.server_address[1]}/evaluate"

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory):
    # Beside the toy policy, a random tiny model that never writes JSON (no RL learning signal).
    raw = make_tiny_model(tmp_path_factory.mktemp("models") / RAW_MODEL, arch="qwen3", tokenizer="qwen3", seed=0)
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD,
                        config={"baseModels": [{"name": RAW_MODEL, "path": str(raw)}]}) as (_, cli):
        yield cli


@pytest.fixture(scope="module")
def evaluator():
    held = HeldEvaluator()
    yield held
    held.close()


@pytest.fixture
def evaluations(cli):
    """Evaluation ids a test started; each is cancelled after the test."""
    started: list[str] = []
    yield started
    for ref in started:
        cli("evaluations", "cancel", ref, "--force")


def watch_then_interrupt(cli, *args, progress_on: str = "stderr") -> tuple[int, str, str]:
    """Runs `trainer ARGS`, sends it SIGINT once it printed its first progress line (on
    `progress_on`: stderr or stdout), and returns (exit code, that first line, everything it wrote
    to stderr after it)."""
    proc = subprocess.Popen([str(cli.binary), *map(str, args), "--trainer-url", cli.url], stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        first = getattr(proc, progress_on).readline().decode(errors="replace")
        os.killpg(proc.pid, signal.SIGINT)
        _, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode, first, rest.decode(errors="replace")


def interrupt_message(short: str) -> str:
    return (f"trainer: stopped watching evaluation {short}; it carries on (Ctrl-C stops only the watching): "
            f"`trainer evaluations wait {short}` follows it again, `trainer evaluations cancel {short}` stops it")


def start_held_evaluation(cli, evaluator, evaluations, dataset: str = DATASET) -> str:
    ref = cli("evaluations", "start", "--model", MODEL, "--workload", WORKLOAD, "--dataset", dataset,
              "--grader", evaluator.grader, "--jq", ".evaluationId", check=True).stdout.strip()
    evaluations.append(ref)
    return ref


# ---- Ctrl-C on an evaluation's wait ------------------------------------------------------------

def test_ctrl_c_on_evaluations_start_wait_and_on_evaluations_wait_says_it_carries_on(cli, evaluator, evaluations):
    code, first, rest = watch_then_interrupt(cli, "evaluations", "start", "--model", MODEL, "--workload", WORKLOAD,
                                             "--dataset", DATASET, "--grader", evaluator.grader, "--wait")
    found = re.match(r"evaluation ([0-9a-f]{12}): ", first)
    assert found, first + rest
    short = found.group(1)
    evaluations.append(short)
    assert code == 130, first + rest
    assert interrupt_message(short) in rest, rest
    # It does carry on: still open, not cancelled by the Ctrl-C.
    assert cli.json("evaluations", "get", short)["phase"] in ("QUEUED", "RUNNING")

    code, first, rest = watch_then_interrupt(cli, "evaluations", "wait", short)
    assert first.startswith(f"evaluation {short}: "), first + rest
    assert code == 130, first + rest
    assert interrupt_message(short) in rest, rest
    assert cli.json("evaluations", "get", short)["phase"] in ("QUEUED", "RUNNING")


def test_ctrl_c_on_runs_wait_still_says_the_run_carries_on(cli):
    """The shared Ctrl-C code keeps `runs wait`'s words (its live view is on stdout: the first line
    read there)."""
    plan = rl_plan(steps=100000)
    run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan, check=True).stdout.strip()
    short = run_id[:12]
    try:
        code, first, err = watch_then_interrupt(cli, "runs", "wait", run_id, progress_on="stdout")
        assert code == 130, first
        assert (f"trainer: stopped watching run {short}; it carries on (Ctrl-C stops only the watching): "
                f"`trainer runs wait {short}` follows it again, `trainer runs cancel {short}` stops it"
                in err), err
    finally:
        cli("runs", "cancel", run_id, "--force")


# ---- an unknown model to evaluate --------------------------------------------------------------

def test_evaluating_an_unknown_model_ends_with_what_can_be_evaluated(cli):
    before = len(cli.json("evaluations", "list")["evaluations"])
    out = cli("evaluations", "start", "--model", "toy-polcy", "--workload", WORKLOAD, "--dataset", DATASET)
    assert out.returncode == 1, out.stdout + out.stderr
    assert "'toy-polcy' is neither a completed run's id nor a selected base model's name" in out.stderr, out.stderr
    assert "did you mean toy-policy?" in out.stderr, out.stderr
    assert out.stderr.endswith(EVALUABLE + "\n"), out.stderr
    # A hex reference that names nothing gets the same next commands.
    out = cli("evaluations", "start", "--model", "abcdef123456", "--workload", WORKLOAD, "--dataset", DATASET)
    assert out.returncode == 1 and out.stderr.endswith(EVALUABLE + "\n"), out.stderr
    assert len(cli.json("evaluations", "list")["evaluations"]) == before


# ---- the dataset by name and short hash -----------------------------------------------------------

def test_evaluations_show_the_datasets_name_and_short_hash_and_json_keeps_the_full_hash(cli, evaluator, evaluations,
                                                                                    tmp_path):
    named = start_held_evaluation(cli, evaluator, evaluations)
    full = cli.json("datasets", "get", DATASET)["hash"]
    assert len(full) == 64
    text = cli("evaluations", "get", named, check=True).stdout
    assert re.search(rf"^Dataset:?\s+{DATASET} \({full[:12]}\)$", text, re.M), text
    assert full not in text, text
    listed = cli("evaluations", "list", check=True).stdout
    row = next(line for line in listed.splitlines() if line.startswith(named[:12]))
    assert f"{DATASET} ({full[:12]})" in row and full not in listed, listed
    assert cli.json("evaluations", "get", named)["dataset"]["hash"] == full
    assert {e["evaluationId"]: e["dataset"]["hash"] for e in cli.json("evaluations", "list")["evaluations"]}[
        cli.json("evaluations", "get", named)["evaluationId"]] == full

    # A dataset registered without a name shows its short hash alone.
    rows = tmp_path / "nameless.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Ticket {i}: a billing issue"},
                                                     {"role": "assistant", "content": '{"label": "billing"}'}]}) + "\n"
                            for i in range(3)))
    nameless = cli.json("datasets", "create", "-f", rows)
    assert nameless["name"] is None, nameless
    unnamed = start_held_evaluation(cli, evaluator, evaluations, dataset=nameless["hash"])
    text = cli("evaluations", "get", unnamed, check=True).stdout
    assert re.search(rf"^Dataset:?\s+{nameless['hash'][:12]}$", text, re.M), text


def test_evaluations_get_follow_watches_to_the_end_and_exit_status_says_how_it_ended(cli, evaluator, evaluations):
    ref = start_held_evaluation(cli, evaluator, evaluations)
    proc = subprocess.Popen([str(cli.binary), "evaluations", "get", ref, "--follow", "--exit-status",
                             "--trainer-url", cli.url], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        first = proc.stderr.readline()
        assert first.startswith(f"evaluation {ref[:12]}: "), first
        cli("evaluations", "cancel", ref, "--force", check=True)
        out, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 4, out  # --exit-status: CANCELLED
    assert re.search(r"^Phase:?\s+CANCELLED$", out, re.M), out
    refused = cli("evaluations", "get", ref, "--exit-status")
    assert refused.returncode == 2 and "--exit-status needs --follow" in refused.stderr, refused.stderr


def test_datasets_name_moves_a_name_to_registered_rows_without_an_upload(cli, tmp_path):
    def rows_file(name: str, label: str) -> str:
        path = tmp_path / name
        path.write_text("".join(json.dumps({"messages": [{"role": "user", "content": f"Ticket {i}: {label}"},
                                                         {"role": "assistant", "content": f'{{"label": "{label}"}}'}]})
                                + "\n" for i in range(3)))
        return str(path)

    first = cli.json("datasets", "create", "-f", rows_file("a.jsonl", "billing"), "--name", "moving-name")["hash"]
    second = cli.json("datasets", "create", "-f", rows_file("b.jsonl", "outage"))["hash"]
    moved = cli("datasets", "name", "moving-name", second[:12], check=True).stdout
    assert f"The name moving-name moved from dataset {first[:12]} to {second[:12]} (3 rows)" in moved, moved
    assert cli.json("datasets", "get", "moving-name")["hash"] == second
    assert cli.json("datasets", "get", first)["hash"] == first  # the old rows stay, by hash
    again = cli("datasets", "name", "moving-name", second, check=True).stdout
    assert "already points at dataset" in again and "nothing changed" in again, again
    given = cli.json("datasets", "name", "second-name", "moving-name")
    assert given["hash"] == second and given["name"] == "second-name" and "movedFrom" not in given, given
    for args, words in [(("Bad Name!", second), "is not a valid dataset name"),
                        (("other-name", "no-such-dataset"), "no-such-dataset")]:
        refused = cli("datasets", "name", *args)
        assert refused.returncode == 1 and words in refused.stderr, refused.stderr
    assert cli.json("datasets", "get", "moving-name")["hash"] == second
    assert cli("datasets", "get", "other-name").returncode == 1


# ---- runs list: an RL run's reward -------------------------------------------------------------

def rl_plan(steps: int, model: str = MODEL) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {model}", "config:", f"  dataset: {DATASET}",
        "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {steps}, seed: 3}}",
        "  reward: {terms: [{kind: json-label-match}]}",
        "  rlHyperparams:", "    groupSize: 4", "    promptsPerStep: 2", "    maxCompletionLength: 10",
        "    microBatchSize: 8", "    optimizer: {learningRate: 0.006, schedule: constant}",
        "execution: {gpus: 0}"]) + "\n"


def sft_plan(steps: int) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  hyperparams:", "    optimizer: {learningRate: 0.003}", f"    training: {{maxSteps: {steps}, batchSize: 4}}",
        "  maxSeqLength: 64", "  model: {precision: FP32}", "execution: {gpus: 0}"]) + "\n"


def test_runs_list_shows_an_rl_runs_reward_labelled_and_an_sft_runs_loss(cli):
    ids = {}
    for method, plan in (("grpo", rl_plan(2)), ("sft", sft_plan(2))):
        out = cli("runs", "start", "-f", "-", "--force", "--wait", "--exit-status", "-q", "-o", "json", input=plan,
                  timeout=900)
        assert out.returncode == 0, out.stdout + out.stderr
        ids[method] = json.loads(out.stdout)["runId"]
    listed = cli("runs", "list", check=True).stdout
    rows = {method: next(line for line in listed.splitlines() if line.startswith(run_id[:12]))
            for method, run_id in ids.items()}

    rl = cli.json("runs", "get", ids["grpo"])["latest"]
    assert "reward" in rl, rl
    cell = re.search(r"\breward (-?[0-9.]+)\b", rows["grpo"])
    assert cell, listed
    assert float(cell.group(1)) == pytest.approx(rl["reward"], rel=1e-3, abs=1e-3), (cell.group(0), rl)

    sft = cli.json("runs", "get", ids["sft"])["latest"]
    assert "reward" not in sft and sft["loss"] > 0, sft
    assert "reward" not in rows["sft"], listed
    assert re.search(r"\s2/2\s+[0-9.]+\s", rows["sft"]), listed


# ---- an RL run with no learning signal -------------------------------------------------------

def test_an_rl_run_whose_groups_never_differ_warns_of_no_learning_signal(cli):
    """A random tiny model never writes the JSON the reward scores: every group's completions get
    reward 0, every advantage is 0, nothing is learnt. After 3 such steps the job says so, once: in
    the live line of `runs wait`, in `runs get` and as the run's `warning` event."""
    cli("base-models", "select", RAW_MODEL, "--wait", "--timeout", "2m", check=True)
    run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=rl_plan(5, RAW_MODEL),
                 check=True).stdout.strip()
    waited = cli("runs", "wait", run_id, timeout=900)
    assert waited.returncode == 0, waited.stdout + waited.stderr
    notes = [line for line in waited.stdout.splitlines() if line.startswith("warning: ")]
    assert len(notes) == 1, waited.stdout
    assert notes[0].startswith("warning: config.reward: no learning signal: in each of the last 3 steps (to step 3) "
                               "every group's completions got the same reward (mean reward 0)"), notes[0]
    run = cli.json("runs", "get", run_id)
    assert run["phase"] == "COMPLETED", run
    assert [w["field"] for w in run["warnings"]] == ["config.reward"], run["warnings"]
    assert "start from a model that writes the expected form" in run["warnings"][0]["message"]
    shown = cli("runs", "get", run_id, check=True).stdout
    assert re.search(r"Warning:\s+config\.reward: no learning signal", shown), shown
    with urllib.request.urlopen(f"{cli.url}/v1/runs/{run_id}/events?waitSeconds=0", timeout=30) as r:
        events = json.loads(r.read())["events"]
    assert [e["field"] for e in events if e.get("type") == "warning"] == ["config.reward"], events


# ---- workloads archive / unarchive --------------------------------------------------------------

def test_an_archived_workload_is_hidden_answers_get_and_refuses_new_work_until_unarchived(cli):
    name = "archive-me"
    cli("workloads", "create", name, "--dataset", DATASET, check=True)
    plan = sft_plan(100000).replace(f"workload: {WORKLOAD}", f"workload: {name}")
    run_id = cli("runs", "start", "-f", "-", "--force", "--jq", ".runId", input=plan, check=True).stdout.strip()
    busy = cli("workloads", "archive", name)
    assert busy.returncode == 1, busy.stdout
    assert f"workload '{name}' has work in progress: run {run_id} (" in busy.stderr, busy.stderr
    assert name in [w["name"] for w in cli.json("workloads", "list")["workloads"]]  # nothing changed
    cli("runs", "cancel", run_id, "--force", check=True)
    cli("runs", "wait", run_id, "--timeout", "5m", "-q", check=True)

    archived = cli("workloads", "archive", name, check=True).stdout
    assert f"Archived workload {name}" in archived and f"trainer workloads unarchive {name}" in archived, archived
    assert name not in [w["name"] for w in cli.json("workloads", "list")["workloads"]]
    assert [w["name"] for w in cli.json("workloads", "list", "--archived", "only")["workloads"]] == [name]
    assert f"{name} (archived)" in cli("workloads", "list", "--archived", "include", check=True).stdout
    got = cli.json("workloads", "get", name)
    assert got["archived"] is True and got["history"][-1]["change"] == "archived", got
    assert cli.json("runs", "get", run_id)["phase"] == "CANCELLED"  # its runs stay
    refusal = f"workload '{name}' is archived and takes no new work; `trainer workloads unarchive {name}` takes it back"
    for args, kw in [(("runs", "start", "-f", "-", "--force"), {"input": plan}),
                     (("evaluations", "start", "--model", MODEL, "--workload", name), {})]:
        refused = cli(*args, **kw)
        assert refused.returncode == 1 and refusal in refused.stderr, (args, refused.stderr)
    bad = cli("workloads", "list", "--archived", "all")
    assert bad.returncode == 2 and "--archived must be include or only" in bad.stderr, bad.stderr

    cli("workloads", "unarchive", name, check=True)
    assert name in [w["name"] for w in cli.json("workloads", "list")["workloads"]]
    assert "archived" not in cli.json("workloads", "get", name)
    again = cli("runs", "start", "-f", "-", "--dry-run", input=plan)
    assert again.returncode == 0, again.stderr
