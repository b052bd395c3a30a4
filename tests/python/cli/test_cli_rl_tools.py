"""Tool calls in reinforcement runs, through the product: the real `trainer` CLI against a real
trainerd running real GRPO jobs whose rows declare a tool and whose plan names the tool's
executable (rlHyperparams.tools). The policy is rl_tool_toy.py's hand-wired tiny model, which
calls `lookup` after its prompt and after every tool answer.

A declared tool is called with the call's name and arguments, its answer appears in the
rollout (in the template's tool role) and in `runs rollouts`; calls per completion and the
failed share are step figures (`runs metrics`) and job telemetry; a failing tool is counted and
its error shown to the model; a tool command that cannot be run fails the run by name."""
from __future__ import annotations

import json
import os
import re
import stat
import sys
import urllib.request

import pytest

from cli_support import Cli, start_trainerd, stop
from rl_tool_toy import CALL, make_tool_caller, tool_rows

pytestmark = pytest.mark.timeout(1200)  # its RL runs are waited for up to 900 s each (run_to_end)

MODEL = "tool-caller"
DATASET = "tool-tickets"
WORKLOAD = "tool-tests"
GROUP, PROMPTS, STEPS, MAX_CALLS = 2, 2, 2, 2


@pytest.fixture(scope="module")
def service(bin_dir, tmp_path_factory):
    model = make_tool_caller(tmp_path_factory.mktemp("models") / MODEL)
    svc = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                         {"baseModels": [{"name": MODEL, "path": str(model)}]})
    cli = Cli(bin_dir / "trainer", svc.url)
    data = tmp_path_factory.mktemp("data") / "tools.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in tool_rows(8)))
    cli("base-models", "select", MODEL, "--wait", "--timeout", "2m", check=True)
    cli("datasets", "create", "-f", data, "--name", DATASET, check=True)
    cli("workloads", "create", WORKLOAD, check=True)
    yield svc, cli, model
    stop(svc.proc, svc.data_dir)


def write_tool(path, body: str):
    """An executable Python script speaking the tool protocol."""
    path.write_text(f"#!{sys.executable}\nimport json, sys\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def tool_plan(command) -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "config:", f"  dataset: {DATASET}",
        "  method: grpo", "  maxSeqLength: 288", "  model: {precision: FP32}",
        f"  hyperparams: {{training: {{maxSteps: {STEPS}, seed: 1}}}}",
        "  rlHyperparams:", f"    groupSize: {GROUP}", f"    promptsPerStep: {PROMPTS}",
        "    maxCompletionLength: 96", "    optimizer: {learningRate: 0.000001}",
        f"    tools: {{command: {json.dumps(str(command))}, timeoutSeconds: 30, maxCalls: {MAX_CALLS}}}",
        "execution: {gpus: 0}"]) + "\n"


def run_to_end(cli, plan: str):
    out = cli("runs", "start", "-f", "-", "--force", "--wait", input=plan, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    return run_id, cli.json("runs", "get", run_id)


@pytest.fixture(scope="module")
def answered(service, tmp_path_factory):
    """A run whose tool answers with what it received (it runs confined and can write nowhere the
    test could read: the answer in the rollout is the record)."""
    _, cli, _ = service
    folder = tmp_path_factory.mktemp("tool")
    # Its answer is the one expected only when the request was exactly {name, arguments}.
    tool = write_tool(folder / "lookup", "req = json.loads(sys.stdin.readline())\n"
                                         f"ok = sorted(req) == ['arguments', 'name'] and req['name'] == {CALL['name']!r}\n"
                                         "ticket = req['arguments']['ticket'] if ok else -1\n"
                                         "print(json.dumps({'label': 'billing', 'ticket': ticket}))\n")
    run_id, run = run_to_end(cli, tool_plan(tool))
    return run_id, run


def test_a_declared_tool_is_called_and_its_answer_is_in_the_rollout(service, answered):
    _, cli, _ = service
    run_id, run = answered
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    doc = cli.json("runs", "rollouts", run_id)
    assert len(doc["rollouts"]) == GROUP * PROMPTS
    answer = '{"label":"billing","ticket":7}'  # the ticket of CALL's arguments: the request was whole
    for r in doc["rollouts"]:
        assert r["toolCalls"] == MAX_CALLS and r["toolFailures"] == 0, r
        # The call, then the answer in the template's tool role, twice; the third call ends it.
        assert r["completion"].count("<tool_call>") == MAX_CALLS + 1, r["completion"]
        assert r["completion"].count("<tool_response>\n" + answer + "\n</tool_response>") == MAX_CALLS, r["completion"]
        assert r["terminated"] is True
    text = cli("runs", "rollouts", run_id, check=True).stdout
    assert f"{MAX_CALLS} tool calls" in text and "failed" not in text, text
    assert answer in text, text


def test_tool_calls_per_completion_and_the_failed_share_are_measured(service, answered):
    svc, cli, model = service
    run_id, _ = answered
    import transformers

    tok = transformers.AutoTokenizer.from_pretrained(model)
    row = tool_rows(1)[0]
    prompt = tok.apply_chat_template(row["messages"][:1], tools=row["tools"], add_generation_prompt=True, tokenize=False)
    prompt_tokens = len(tok.encode(prompt, add_special_tokens=False))
    steps = cli.json("runs", "metrics", run_id)["steps"]
    for s in steps:
        assert s["measured"]["toolCallsMean"] == MAX_CALLS and s["measured"]["toolCallFailureShare"] == 0
        # Tool answers are not the model's tokens: the batch counts prompts and sampled tokens only
        # (every prompt has the same length: tickets 0 to 7). The prompt renders the tool schema
        # with its keys in the row's order, as transformers does, so the count is exact.
        rl = s["rl"]
        tool_tokens = sum(rl["completionLengths"]) - rl["generatedTokens"]
        assert tool_tokens > 0
        prompts = s["batchTokens"] - rl["generatedTokens"]
        assert prompts % (GROUP * PROMPTS) == 0 and prompts // (GROUP * PROMPTS) == prompt_tokens, (prompt_tokens, s)
    out = cli("runs", "metrics", run_id, "--fields", "toolCallsMean,toolCallFailureShare", check=True).stdout
    header = re.split(r"\s{2,}", out.splitlines()[0].strip())
    row = re.split(r"\s{2,}", out.splitlines()[1].strip())
    assert row[header.index("TOOLCALLSMEAN")] == "2" and row[header.index("TOOLCALLFAILURESHARE")] == "0", out
    with urllib.request.urlopen(svc.url + "/metrics", timeout=30) as r:
        metrics = r.read().decode()
    mean = [line for line in metrics.splitlines()
            if line.startswith("akka_optimize_training_rl_tool_calls_mean{") and run_id in line]
    assert mean and all(line.rsplit(" ", 1)[1] == "2" for line in mean), mean or metrics[:2000]


def test_a_failing_tool_is_counted_and_its_error_shown_to_the_model(service, tmp_path):
    _, cli, _ = service
    tool = write_tool(tmp_path / "broken", "sys.stdin.readline()\nsys.exit(3)\n")
    run_id, run = run_to_end(cli, tool_plan(tool))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    doc = cli.json("runs", "rollouts", run_id)
    for r in doc["rollouts"]:
        assert r["toolCalls"] == MAX_CALLS and r["toolFailures"] == MAX_CALLS, r
        assert '{"error":"the tool exited with code 3"}' in r["completion"], r["completion"]
    steps = cli.json("runs", "metrics", run_id)["steps"]
    assert all(s["measured"]["toolCallFailureShare"] == 1 for s in steps)
    text = cli("runs", "rollouts", run_id, check=True).stdout
    assert f"{MAX_CALLS} tool calls ({MAX_CALLS} failed)" in text, text


def test_a_tool_command_that_cannot_run_fails_the_run_by_name(service, tmp_path):
    _, cli, _ = service
    missing = tmp_path / "no-such-tool"
    out = cli("runs", "start", "-f", "-", "--force", "--wait", "--exit-status", input=tool_plan(missing), timeout=600)
    assert out.returncode == 3, out.stdout + out.stderr
    run_id = re.search(r"Started run ([0-9a-f]+)", out.stdout).group(1)
    reason = cli.json("runs", "get", run_id)["failureReason"]
    assert "config.rlHyperparams.tools.command" in reason and str(missing) in reason, reason


# What a confined tool tries; its answer is short (the completion holds it within its token budget):
# for each attempt 1 when it was allowed, else 0; the connection's error; the environment's names
# beyond the confinement's own; the user id.
PROBE = '''
import os, socket
report = {}
def attempt(name, fn):
    try:
        fn()
        report[name] = 1
    except Exception as e:
        report[name] = 0
attempt("s", lambda: open("/etc/shadow").read(1))
attempt("d", lambda: open(STORE, "rb").read(1))
attempt("l", lambda: os.listdir(DATA))
attempt("w", lambda: open(OUTSIDE, "w").write("x"))
attempt("x", lambda: open(os.path.join(os.environ["TMPDIR"], "x"), "w").write("x"))
try:
    socket.create_connection(("127.0.0.1", PORT), timeout=2).close()
    report["c"] = "connected"
except Exception as e:
    report["c"] = type(e).__name__
report["e"] = len(set(os.environ) - {"HOME", "PATH", "TMPDIR", "PWD", "LC_CTYPE"})
report["u"] = os.getuid()
sys.stdin.readline()
print(json.dumps(report))
'''


def test_a_tool_runs_confined_it_reaches_neither_the_store_nor_the_service_nor_the_jobs_environment(service, tmp_path):
    """The fault tour's user code listed runs and cancelled them through the API, read the store
    file and the job's environment. A confined tool (bubblewrap) sees its own file, its
    interpreter and a scratch folder; no network, no host files, nothing of the job's environment."""
    svc, cli, _ = service
    store = svc.data_dir / "state.db"
    assert store.exists()
    outside = tmp_path / "written-by-the-tool"
    body = (PROBE.replace("STORE", repr(str(store))).replace("DATA", repr(str(svc.data_dir)))
            .replace("OUTSIDE", repr(str(outside))).replace("PORT", str(int(svc.url.rsplit(":", 1)[1]))))
    tool = write_tool(tmp_path / "probe", body)
    run_id, run = run_to_end(cli, tool_plan(tool))
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    completion = cli.json("runs", "rollouts", run_id)["rollouts"][0]["completion"]
    report = json.loads(re.search(r"<tool_response>\n(.*?)\n</tool_response>", completion, re.S).group(1))
    assert {k: report[k] for k in "sdlwx"} == {"s": 0, "d": 0, "l": 0, "w": 0, "x": 1}, report
    assert report["c"] == "ConnectionRefusedError", report  # a private loopback: trainerd is not there
    assert not outside.exists()
    assert report["e"] == 0, report  # nothing of the job's environment (its catalog URL, keys)
    if os.geteuid() == 0:
        assert report["u"] == 65534, report  # nobody, not trainerd's root
