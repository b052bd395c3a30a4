"""Reward terms beyond json-label-match through the product: `trainer runs start` against a real
trainerd whose configuration declares judges served by a real local HTTP server
(graders_support.py), an http: evaluator on the same server, and rule:/bundle: Python modules run
in the job's reward worker. Every unscored call is counted by cause in the step's rl.terms and
scored zero; a refusal or a run of failures stops the job with an error naming the term; a rule
reward rises on the toy task (rl_toy.py), the same with the same seed."""
from __future__ import annotations

import urllib.request

import pytest

from cli_support import free_port
from graders_support import DATASET, MODEL, WORKLOAD, GraderServer, phases, plan, run_to_end
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(1200)  # its RL runs are waited for up to 900 s each (graders_support.run_to_end)

JUDGES = ["good", "cycle", "refuser", "broken"]


@pytest.fixture(scope="module")
def graders():
    server = GraderServer()
    yield server
    server.close()


@pytest.fixture(scope="module")
def cli(bin_dir, tmp_path_factory, graders):
    offline = {"name": "offline", "url": f"http://127.0.0.1:{free_port()}", "readyTimeoutSeconds": 3}
    config = {"judges": [{"name": n, "url": f"{graders.url}/{n}", "readyTimeoutSeconds": 60} for n in JUDGES] + [offline]}
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, config=config,
                        reward_python=True) as (service, cli):
        cli.service = service
        yield cli


def term_totals(steps, key):
    """Sums one term's `key` object ({cause: n} or {input, output}) over the steps."""
    totals: dict[str, int] = {}
    for s in steps:
        for k, v in s["rl"]["terms"][0][key].items():
            totals[k] = totals.get(k, 0) + v
    return totals


def test_a_judge_scores_through_its_phases_and_its_tokens_are_counted(cli, graders, tmp_path):
    instructions = "Grade the ticket label. Reply with JSON {\"score\": 0..1}."
    run, steps = run_to_end(cli, plan(f"{{kind: 'model:good', graderInstructions: '{instructions}'}}"), tmp_path)
    # The judge had to answer before devices were claimed.
    p = phases(run)
    assert p.index("DEPLOYING_GRADER") < p.index("WAITING_FOR_GRADER") < p.index("SUBMITTING"), p
    assert graders.probes["good"] >= 1
    calls = graders.requests["good"]
    assert len(calls) == 2 * 2 * 2  # steps x prompts x group, no failure so no retry
    for body in calls:
        assert body["model"] == "good"
        assert body["messages"][0] == {"role": "system", "content": instructions}
        request, answer = body["messages"][1]["content"].split("\n\nThe assistant's answer:\n")
        assert request.startswith("The user's request:\nTicket ")
        assert "label" not in request  # the gold answer ({"label": ...}) is never sent
    for s in steps:
        term = s["rl"]["terms"][0]
        assert term["name"] == "model:good" and term["failures"] == 0
        assert len(term["callSeconds"]) == 4
        assert all(r in (1.0, 0.25) for r in s["rl"]["rewards"]), s["rl"]["rewards"]
    assert term_totals(steps, "judgeTokens") == {"input": 30 * 8, "output": 5 * 8}
    # Job telemetry: the judge's tokens under the registry's names, relayed on trainerd's /metrics.
    metrics = urllib.request.urlopen(cli.service.url + "/metrics", timeout=10).read().decode()
    tokens = [line for line in metrics.splitlines()
              if line.startswith("akka_optimize_training_rl_grader_tokens_total{") and 'rl_term="model:good"' in line
              and run["runId"] in line]
    assert any('token_type="input"' in t and float(t.rsplit(" ", 1)[1]) == 240 for t in tokens), tokens


def test_the_plans_grader_instructions_reach_its_judges_without_their_own(cli, graders, tmp_path):
    top = "Top-level: grade the ticket label. Reply with JSON {\"score\": 0..1}."
    own = "Term-level: be strict."
    terms = f"{{kind: 'model:good'}}, {{kind: 'model:good', name: strict, graderInstructions: '{own}'}}"
    text = f"graderInstructions: '{top}'\n" + plan(terms, steps=1)
    dry = cli("runs", "start", "-f", "-", "--dry-run", "--show-resolved", input=text, check=True)
    assert any(line.strip().startswith("graderInstructions:") and "Top-level: grade the ticket label" in line
               for line in dry.stdout.splitlines()), dry.stdout
    assert "Judge instructions of model:good (config.reward.terms[0]): plan" in dry.stdout, dry.stdout
    assert "Judge instructions of model:good (config.reward.terms[1]): term" in dry.stdout, dry.stdout
    before = len(graders.requests["good"])
    run, _ = run_to_end(cli, text, tmp_path)
    systems = [b["messages"][0]["content"] for b in graders.requests["good"][before:]]
    assert len(systems) == 2 * 2 * 2, len(systems)  # two terms x prompts x group
    assert sorted(set(systems)) == sorted({top, own}) and systems.count(top) == 4, systems
    assert run["judgeInstructions"] == [
        {"at": "config.reward.terms[0]", "grader": "model:good", "graderInstructionsSource": "plan"},
        {"at": "config.reward.terms[1]", "grader": "model:good", "graderInstructionsSource": "term"}]
    shown = cli("runs", "get", run["runId"], check=True).stdout
    assert "model:good (config.reward.terms[0]): plan" in shown, shown


def test_grader_instructions_on_a_plan_without_a_judge_are_refused_by_name(cli):
    text = "graderInstructions: 'Be fair.'\n" + plan("{kind: json-label-match}")
    out = cli("runs", "start", "-f", "-", "--dry-run", input=text)
    assert out.returncode != 0
    assert "graderInstructions" in out.stderr and "applies to model: graders (judges) only" in out.stderr, out.stderr


def test_judge_timeouts_and_replies_without_a_verdict_score_zero_and_are_counted(cli, graders, tmp_path):
    term = "{kind: 'model:cycle', timeoutSeconds: 1, retries: 0, concurrency: 1}"
    run, steps = run_to_end(cli, plan(term, steps=2), tmp_path)
    # 8 calls: k % 3 == 0 scored 0.5, == 1 no verdict, == 2 past the timeout.
    assert len(graders.requests["cycle"]) == 8
    assert term_totals(steps, "failuresByCause") == {"timeout": 2, "unreachable": 0, "no_verdict": 3, "gold_not_label": 0}
    rewards = sorted(r for s in steps for r in s["rl"]["rewards"])
    assert rewards == [0.0] * 5 + [0.5] * 3
    assert sum(s["rl"]["terms"][0]["failures"] for s in steps) == 5
    # A timed-out call waited its timeout (the run ending at all shows it waited no longer: the
    # judge never answers those calls). No upper bound on durations: a loaded machine stretches them.
    # The socket's own timer may fire a hair before the call's clock reads 1 s (CI saw one such
    # call); the judge's other answers take milliseconds, so 0.95 s still tells them apart.
    slow = [x for s in steps for x in s["rl"]["terms"][0]["callSeconds"] if x >= 0.95]
    assert len(slow) >= 2, slow


def test_a_refused_judge_call_stops_the_job_naming_the_term(cli, graders, tmp_path):
    run, _ = run_to_end(cli, plan("{kind: 'model:refuser'}"), tmp_path, expect="FAILED")
    reason = run["failureReason"]
    assert "config.reward.terms[0] (model:refuser) was refused" in reason and "HTTP 401" in reason, reason
    # The judge's own words ("invalid API key") stay out of the reason (issue 32): status and size only.
    assert "invalid API key" not in reason and "bytes, not shown" in reason, reason


def test_a_judge_failing_too_many_calls_in_a_row_stops_the_job(cli, graders, tmp_path):
    run, _ = run_to_end(cli, plan("{kind: 'model:broken', maxConsecutiveFailures: 3, retries: 0}"), tmp_path,
                        expect="FAILED")
    reason = run["failureReason"]
    assert "config.reward.terms[0] (model:broken) produced no score in 3 calls in a row" in reason, reason
    assert "unreachable" in reason and "HTTP 500" in reason, reason
    assert "crashed" not in reason, reason


def test_a_judge_that_does_not_answer_fails_the_run_before_devices_are_claimed(cli, tmp_path):
    run, steps = run_to_end(cli, plan("{kind: 'model:offline'}"), tmp_path, expect="FAILED")
    assert phases(run)[-2:] == ["WAITING_FOR_GRADER", "FAILED"], phases(run)
    assert "judge 'offline' at http://127.0.0.1:" in run["failureReason"], run["failureReason"]
    assert "did not answer within 3 s (readyTimeoutSeconds)" in run["failureReason"], run["failureReason"]
    assert steps == []


def test_an_unknown_judge_is_refused_at_submission_by_name(cli):
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan("{kind: 'model:nobody'}"))
    assert out.returncode != 0
    assert "config.reward.terms[0].kind" in out.stderr and "judge 'nobody' is neither declared" in out.stderr, out.stderr
    assert "good, cycle, refuser, broken, offline" in out.stderr, out.stderr


def test_an_http_evaluator_is_called_with_the_envelope_and_its_failures_counted(cli, graders, tmp_path):
    term = f"{{kind: 'http:{graders.url}/eval-cycle/evaluate', retries: 0, concurrency: 1}}"
    run, steps = run_to_end(cli, plan(term), tmp_path)
    calls = graders.requests["eval-cycle"]
    assert len(calls) == 8
    assert all(set(c) == {"input", "output", "expected"} and c["expected"] == '{"label": "billing"}' for c in calls)
    assert term_totals(steps, "failuresByCause") == {"timeout": 0, "unreachable": 2, "no_verdict": 3, "gold_not_label": 0}
    assert sorted(r for s in steps for r in s["rl"]["rewards"]) == [0.0] * 5 + [1.0] * 3


def test_a_refused_http_evaluator_stops_the_job(cli, graders, tmp_path):
    term = f"{{kind: '{graders.url}/eval-refuser/evaluate'}}"
    run, _ = run_to_end(cli, plan(term), tmp_path, expect="FAILED")
    assert "was refused" in run["failureReason"] and "HTTP 403" in run["failureReason"], run["failureReason"]
    assert "forbidden" not in run["failureReason"], run["failureReason"]


BAD_BUNDLE = '''
import os, pathlib, time
# The worker runs confined: its scratch folder (TMPDIR) is the one place it may write, and it
# survives the worker's restarts within the job.
COUNTER = pathlib.Path(os.environ["TMPDIR"]) / "calls.txt"

def compute_score(data_source, solution_str, ground_truth, extra_info):
    k = int(COUNTER.read_text()) if COUNTER.exists() else 0
    COUNTER.write_text(str(k + 1))
    if k % 4 == 1:
        raise RuntimeError("the scorer broke")
    if k % 4 == 2:
        time.sleep(30)
    if k % 4 == 3:
        return {"verdict": "great"}
    return 1.0
'''


def test_a_bundle_that_raises_hangs_or_returns_garbage_is_counted_and_bounded(cli, tmp_path):
    module = tmp_path / "bad_scorer.py"
    module.write_text(BAD_BUNDLE)
    run, steps = run_to_end(cli, plan(f"{{kind: 'bundle:{module}', timeoutSeconds: 1}}"), tmp_path)
    assert not (tmp_path / "calls.txt").exists()  # 8 calls (the counts below), none written beside the module
    assert steps[0]["rl"]["terms"][0]["name"] == "bundle:bad_scorer.py"
    assert term_totals(steps, "failuresByCause") == {"timeout": 2, "unreachable": 0, "no_verdict": 4, "gold_not_label": 0}
    assert sorted(r for s in steps for r in s["rl"]["rewards"]) == [0.0] * 6 + [1.0] * 2
    # The hung calls waited their timeout (its timer may fire a hair early: counted from 0.95 s; a
    # call that answers takes milliseconds); the run ending shows the hang was cut there.
    calls = [x for s in steps for x in s["rl"]["terms"][0]["callSeconds"]]
    hung = [x for x in calls if x >= 0.95]
    assert len(hung) >= 2 and max(calls) < 10, calls


def test_a_rule_that_does_not_load_or_is_not_on_the_host_is_refused(cli, tmp_path):
    missing = tmp_path / "no-such-score.py"  # within the folders trainerd lets plans name (its tmp folder)
    out = cli("runs", "start", "-f", "-", "--dry-run", input=plan(f"{{kind: 'rule:{missing}'}}"))
    assert out.returncode != 0 and "config.reward.terms[0].kind" in out.stderr and "no such file" in out.stderr, out.stderr
    broken = tmp_path / "broken.py"
    broken.write_text("import not_a_module_anywhere\n")
    run, _ = run_to_end(cli, plan(f"{{kind: 'rule:{broken}'}}"), tmp_path, expect="FAILED")
    assert "config.reward.terms[0].kind: rule:" in run["failureReason"], run["failureReason"]
    assert "No module named 'not_a_module_anywhere'" in run["failureReason"], run["failureReason"]


SCORING_PACKAGE = {
    "scoring/__init__.py": "",
    "scoring/labels.py": '''
def by_label(data_source, solution_str, ground_truth, extra_info):
    """1 when the answer names the gold label."""
    return 1.0 if '"billing"' in solution_str else 0.25


def compute_score(data_source, solution_str, ground_truth, extra_info):
    return 0.0
''',
}


def write_package(folder, files):
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)
    return folder


def test_a_bundle_function_named_after_the_module_is_the_one_called(cli, tmp_path):
    package = write_package(tmp_path / "pkg", SCORING_PACKAGE)
    run, steps = run_to_end(cli, plan(f"{{kind: 'bundle:{package}#scoring.labels:by_label'}}"), tmp_path)
    assert steps[0]["rl"]["terms"][0]["name"] == "bundle:scoring.labels:by_label"
    rewards = [r for s in steps for r in s["rl"]["rewards"]]
    assert len(rewards) == 8 and all(r in (1.0, 0.25) for r in rewards), rewards  # never compute_score's 0
    assert sum(s["rl"]["terms"][0]["failures"] for s in steps) == 0


def test_a_bundle_function_the_module_lacks_fails_the_job_naming_the_term(cli, tmp_path):
    package = write_package(tmp_path / "pkg", SCORING_PACKAGE)
    run, steps = run_to_end(cli, plan(f"{{kind: 'bundle:{package}#scoring.labels:no_such_fn'}}"), tmp_path,
                            expect="FAILED")
    reason = run["failureReason"]
    assert f"config.reward.terms[0].kind: bundle:{package}#scoring.labels:no_such_fn" in reason, reason
    assert "has no function no_such_fn()" in reason, reason
    assert steps == []


RULE = '''
def compute_score(data_source, solution_str, ground_truth, extra_info):
    """1 when the answer names the gold label, billing; verl's convention."""
    return {"score": 1.0 if '"billing"' in solution_str else 0.0}
'''
RISE_STEPS = 24


def test_a_rule_reward_rises_on_the_toy_task_reproducibly(cli, tmp_path):
    rule = tmp_path / "score.py"
    rule.write_text(RULE)
    term = f"{{kind: 'rule:{rule}'}}"
    _, steps = run_to_end(cli, plan(term, steps=RISE_STEPS, group=8, prompts=4, length=10), tmp_path)
    assert steps[0]["rl"]["terms"][0]["name"] == "rule:score.py"
    rewards = [s["rl"]["rewardMean"] for s in steps]
    first, last = sum(rewards[:4]) / 4, sum(rewards[-4:]) / 4
    assert last >= first + 0.2 and last >= 0.5, rewards
    # The same seed gives the same rollouts and rewards.
    _, again = run_to_end(cli, plan(term, steps=4, group=8, prompts=4, length=10), tmp_path)
    assert [s["rl"]["rewards"] for s in again] == [s["rl"]["rewards"] for s in steps[:4]]


HOSTILE_SCORER = '''
import os, signal, socket

def refused(fn):
    try:
        fn()
        return 0
    except (OSError, MemoryError):
        return 1

def fork_bomb():
    children = []
    try:
        for _ in range(10000):
            pid = os.fork()
            if pid == 0:
                signal.pause()
                os._exit(0)
            children.append(pid)
    finally:
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)

def compute_score(data_source, solution_str, ground_truth, extra_info):
    checks = [
        refused(lambda: bytearray(50 * 1024 ** 3)),
        refused(lambda: bytearray(8 * 1024 ** 3)),  # within this host's memory, beyond the confinement's
        refused(fork_bomb),
        refused(lambda: socket.create_connection(("127.0.0.1", PORT), timeout=2)),
        refused(lambda: open("/etc/shadow").read(1)),
        refused(lambda: open(STORE, "rb").read(1)),
        refused(lambda: open(OUTSIDE, "w").write("x")),
    ]
    return 1.0 if all(checks) else 0.0
'''


def test_a_hostile_scoring_function_is_confined_and_the_run_completes(cli, tmp_path):
    """A reward function that allocates 50 GB, forks 10,000 processes, connects to trainerd, reads
    /etc/shadow and the store, and writes outside its scratch folder: each is refused inside the
    confinement (every call scores 1 only when all were), the run completes, nothing outside changed."""
    store = cli.service.data_dir / "state.db"
    assert store.exists()
    outside = tmp_path / "written-by-the-scorer"
    port = int(cli.service.url.rsplit(":", 1)[1])
    module = tmp_path / "hostile.py"
    module.write_text(HOSTILE_SCORER.replace("PORT", str(port)).replace("STORE", repr(str(store)))
                      .replace("OUTSIDE", repr(str(outside))))
    run, steps = run_to_end(cli, plan(f"{{kind: 'rule:{module}', timeoutSeconds: 60}}"), tmp_path)
    rewards = [r for s in steps for r in s["rl"]["rewards"]]
    assert rewards == [1.0] * len(rewards) and len(rewards) == 8, rewards
    assert not outside.exists()
    assert cli("info").returncode == 0  # trainerd answers as before
