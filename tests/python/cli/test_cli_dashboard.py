"""The web dashboard trainerd serves at / (docs/dashboard.md), in headless Chromium driven over the
DevTools protocol, against a real trainerd running real jobs of the toy policy (rl_toy.py):

- the runs list shows a training run with its phase;
- the run's page draws its loss curve from the metrics stream (Server-Sent Events), and the curve's
  point count grows while the run trains, without the page asking for the metrics again;
- a reinforcement run's page shows its best and worst rollouts with their terms' shares, and its
  reward curve;
- a workload's page shows its score table; the workloads list links it; the capacity page shows
  its pool;
- every view is reached by its own address, and no view logs an error (uncaught exceptions,
  console.error, failed requests);
- the stream of an ended run, read over plain HTTP, sends every step, the run and its end, and closes.

Screenshots of each view go to $TRAINER_TEST_ARTIFACTS/dashboard when that is set, else to a
temporary folder of the test session (named in the output)."""
from __future__ import annotations

import json
import os
import pathlib
import urllib.error
import urllib.request

import pytest

from auth import token_for
from cli_support import TERMINAL, cancel_run, ended, start_run_id, wait_step
from headless_chromium import Chromium
from rl_toy import toy_rows
from toy_rl_service import toy_rl_service

pytestmark = pytest.mark.timeout(900)

MODEL = "toy-policy"
DATASET = "toy-tickets"
WORKLOAD = "dashboard-tests"
SFT_STEPS = 3000  # far more than the test waits for: the run is cancelled once its curve was seen growing
RL_STEPS = 4
GROWTH = 3  # points the curve must gain while the page watches


def sft_plan() -> str:
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "configName: dashboard-sft", "config:",
        f"  dataset: {DATASET}", "  maxSeqLength: 64", "  model: {precision: FP32}",
        f"  hyperparams: {{training: {{maxSteps: {SFT_STEPS}, batchSize: 2}}, optimizer: {{learningRate: 0.001}}}}",
        "execution: {gpus: 0}"]) + "\n"


def rl_plan() -> str:
    """test_cli_rollouts.py's toy GRPO run: two weighted terms, so each reward splits into two shares."""
    return "\n".join([
        "kind: run", f"workload: {WORKLOAD}", f"baseModel: {MODEL}", "configName: dashboard-grpo", "config:",
        f"  dataset: {DATASET}", "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
        "  hyperparams:", "    lora: {rank: 8, alpha: 16}", f"    training: {{maxSteps: {RL_STEPS}, seed: 5}}",
        "  reward:", "    terms:", "      - {kind: json-label-match, name: label, weight: 0.75}",
        "      - {kind: json-label-match, name: label-again, weight: 0.25}",
        "  rlHyperparams:", "    groupSize: 4", "    promptsPerStep: 2",
        "    maxCompletionLength: 10", "    iterationsPerBatch: 2", "    microBatchSize: 8",
        "    optimizer: {learningRate: 0.006, schedule: constant}",
        "execution: {gpus: 0}"]) + "\n"


@pytest.fixture(scope="module")
def service(bin_dir, tmp_path_factory):
    with toy_rl_service(bin_dir, tmp_path_factory, model=MODEL, dataset=DATASET, workload=WORKLOAD, rows=16) as s:
        yield s


@pytest.fixture(scope="module")
def cli(service):
    return service[1]


@pytest.fixture(scope="module")
def url(service):
    return service[0].url


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory) -> pathlib.Path:
    root = os.environ.get("TRAINER_TEST_ARTIFACTS")
    folder = pathlib.Path(root) / "dashboard" if root else tmp_path_factory.mktemp("dashboard-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    print(f"dashboard screenshots: {folder}")
    return folder


@pytest.fixture(scope="module")
def browser(tmp_path_factory, url):
    """Chromium holding the dashboard's token cookie for the service (docs/security.md, "The dashboard")."""
    chromium = Chromium(tmp_path_factory.mktemp("chromium"))
    chromium.set_cookie(url, "trainer_token", token_for(url))
    yield chromium
    chromium.close()


@pytest.fixture
def page(browser, artifacts, request):
    """The browser, checked after the test: nothing on the page went wrong. A test that failed, or
    whose page logged errors, leaves a screenshot of where the page was (NAME-failed.png)."""
    browser.take_errors()
    failed_before = request.session.testsfailed
    yield browser
    errors = browser.take_errors()
    if errors or request.session.testsfailed > failed_before:
        browser.screenshot(artifacts / f"{request.node.name}-failed.png")
    assert errors == [], f"the dashboard logged errors: {json.dumps(errors, indent=1)}"


@pytest.fixture(scope="module")
def training(cli):
    """An SFT run that trains far longer than the tests watch it; cancelled at the module's end."""
    run_id = start_run_id(cli, sft_plan())
    yield run_id
    run = cli.json("runs", "get", run_id)
    if run["phase"] not in TERMINAL:
        cancel_run(cli, run_id)


@pytest.fixture(scope="module")
def reinforced(cli, training):
    """The toy GRPO run, finished (it waits for the SFT run's device: cancel that first)."""
    cancel_run(cli, training)
    run_id = start_run_id(cli, rl_plan())
    run = ended(cli, run_id)
    assert run["phase"] == "COMPLETED", run.get("failureReason")
    return run_id


LOSS_POINTS = "Number(document.querySelector('#chart-loss').dataset.points)"


def rows_of(selector: str) -> str:
    """Script for the text of each cell of each body row of the table at `selector`."""
    return f"[...document.querySelectorAll('{selector} tbody tr')].map(r => [...r.cells].map(c => c.textContent))"


def test_the_runs_list_shows_a_training_run_with_its_phase(page, url, cli, training, artifacts):
    wait_step(cli, training, 1)
    page.navigate(url + "/")
    row = f"document.querySelector('#runs tr[data-run-id=\"{training}\"]')"
    page.wait_for(f"!!{row}", what="the run's row in the runs list")
    cells = page.evaluate(f"[...{row}.cells].map(c => c.textContent)")
    assert cells[0] == training[:12], cells
    assert cells[4] == page.evaluate(f"{row}.dataset.phase") == "TRAINING", cells
    assert cells[1] == WORKLOAD and cells[2] == "dashboard-sft" and cells[3] == "sft", cells
    page.screenshot(artifacts / "runs-list.png")
    # The row's link is the run page's address.
    assert page.evaluate(f"{row}.querySelector('a').getAttribute('href')") == f"/runs/{training}"


def test_the_run_page_draws_a_loss_curve_that_grows_while_the_run_trains(page, url, cli, training, artifacts):
    page.requests.clear()
    page.navigate(f"{url}/runs/{training}")
    first = page.wait_for(f"(n => n > 0 && n)({LOSS_POINTS})", what="the loss curve's first points")
    grown = page.wait_for(f"(n => n >= {first + GROWTH} && n)({LOSS_POINTS})",
                          what=f"the loss curve to grow to {first + GROWTH} points", timeout=180)
    run = cli.json("runs", "get", training)
    assert run["phase"] == "TRAINING", run["phase"]  # it grew while the run trained
    assert grown >= first + GROWTH
    page.screenshot(artifacts / "run-training.png")
    assert page.evaluate("document.querySelector('#run-header .phase').textContent") in ("TRAINING", "PREPARING")
    # The points came over one stream, not by asking for the metrics again and again.
    streams = [u for u in page.requests if u.endswith(f"/v1/runs/{training}/metrics/stream")]
    polled = [u for u in page.requests if "/metrics?" in u or u.endswith("/metrics")]
    assert len(streams) == 1 and polled == [], page.requests
    # Cancelled, the run ends on the page too: the stream's last event, every stored step drawn.
    cancel_run(cli, training)
    page.wait_for("document.querySelector('#stream-state').textContent === 'ended (CANCELLED)'",
                  what="the stream's end on the page")
    steps = len(cli.json("runs", "metrics", training)["steps"])
    page.wait_for(f"{LOSS_POINTS} === {steps}",
                  what=f"all {steps} stored steps drawn")
    page.wait_for("document.querySelector('#run-header .phase').textContent === 'CANCELLED'",
                  what="the header's phase to follow the run")
    assert page.evaluate("document.querySelectorAll('#phases tbody tr').length") >= 3  # its phase history
    page.screenshot(artifacts / "run-cancelled.png")


def test_a_reinforcement_runs_page_shows_its_best_and_worst_rollouts_and_reward_curve(page, url, cli, reinforced,
                                                                                      artifacts):
    """Each rollout's reward and its terms' shares (weight x raw), as `runs rollouts --best/--worst`."""
    page.navigate(f"{url}/runs/{reinforced}")
    page.wait_for("document.querySelectorAll('#rollouts-best tbody tr').length > 0", what="the best rollouts")
    best, worst = page.evaluate(rows_of("#rollouts-best")), page.evaluate(rows_of("#rollouts-worst"))
    api_best = cli.json("runs", "rollouts", reinforced, "--best", "5")["rollouts"]
    api_worst = cli.json("runs", "rollouts", reinforced, "--worst", "5")["rollouts"]
    assert [float(r[0]) for r in best] == pytest.approx([r["reward"] for r in api_best], abs=1e-4), best
    assert [float(r[0]) for r in worst] == pytest.approx([r["reward"] for r in api_worst], abs=1e-4), worst
    assert "label" in best[0][1] and "label-again" in best[0][1], best[0]  # each term's share
    assert best[0][3] == api_best[0]["completion"]
    page.wait_for(f"Number(document.querySelector('#chart-reward').dataset.points) === {RL_STEPS}",
                  what="the reward curve's points")
    page.wait_for("document.querySelector('#stream-state').textContent === 'ended (COMPLETED)'",
                  what="the stream of an ended run to end")
    page.screenshot(artifacts / "run-rollouts.png")


def sse_events(text: str) -> list[tuple[str, dict]]:
    """The (event, data) pairs of a Server-Sent Events body; comments and `retry:` left out."""
    events = []
    for block in text.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.splitlines() if line and not line.startswith(":")
                      and not line.startswith("retry:"))
        if "event" in fields:
            events.append((fields["event"], json.loads(fields["data"])))
    return events


def test_the_stream_of_an_ended_run_sends_every_step_then_its_end_and_closes(url, cli, reinforced):
    with urllib.request.urlopen(f"{url}/v1/runs/{reinforced[:8]}/metrics/stream", timeout=30) as r:
        assert r.headers["Content-Type"] == "text/event-stream"
        events = sse_events(r.read().decode())  # the answer ends by itself
    assert [name for name, _ in events] == ["points", "run", "end"], events
    points, run, end = (data for _, data in events)
    assert points["reset"] is True and points["steps"] == cli.json("runs", "metrics", reinforced)["steps"]
    assert run["runId"] == reinforced and run["phase"] == "COMPLETED" and run["progress"]["step"] == RL_STEPS
    assert end == {"phase": "COMPLETED", "outcome": "COMPLETED", "failureReason": None}


def test_a_workloads_page_shows_its_score_table(page, url, cli, reinforced, artifacts, tmp_path):
    held_out = tmp_path / "held-out.jsonl"
    held_out.write_text("".join(json.dumps(r) + "\n" for r in toy_rows(4, offset=100)))
    cli("datasets", "create", "-f", held_out, "--name", "held-out", check=True)
    cli("workloads", "set-evaluation", WORKLOAD, "--dataset", "held-out", "--grader", "json-label-match", check=True)
    for model in (["--model", MODEL, "--workload", WORKLOAD], ["--model", reinforced]):
        done = cli.json("evaluations", "start", *model, "--max-new-tokens", 8, "--wait", "--exit-status", "-q")
        assert done["phase"] == "COMPLETED", done
    table = cli.json("workloads", "scores", WORKLOAD)["tables"][0]
    page.navigate(f"{url}/workloads/{WORKLOAD}")
    rows = page.wait_for(f"(rows => rows.length >= 2 && rows)({rows_of('#scores table.scores')})",
                         what="the score table's rows")
    assert [r[0] for r in rows] == ["baseline", "dashboard-grpo"], rows
    assert float(rows[1][1]) == pytest.approx(table["columns"][0]["meanScore"], abs=1e-4)
    page.screenshot(artifacts / "workload-scores.png")
    # The run's page lists its evaluation.
    page.navigate(f"{url}/runs/{reinforced}")
    page.wait_for("document.querySelectorAll('#evaluations tbody tr').length === 1", what="the run's evaluation")


def test_the_workloads_list_links_each_workload_to_its_page(page, url):
    page.navigate(f"{url}/workloads")
    rows = page.wait_for(f"(rows => rows.length && rows)({rows_of('#workloads')})", what="the workloads")
    assert [r[0] for r in rows] == [WORKLOAD], rows
    assert page.evaluate("document.querySelector('#workloads a').getAttribute('href')") == f"/workloads/{WORKLOAD}"


def test_the_capacity_page_shows_the_pool(page, url, artifacts):
    page.navigate(f"{url}/capacity")
    pools = page.wait_for("(rows => rows.length && rows)([...document.querySelectorAll('#pools tbody tr')]"
                          ".map(r => r.cells[0].textContent))", what="the pools")
    assert len(pools) >= 1
    headers = page.evaluate("[...document.querySelectorAll('#pools thead th')].map(c => c.textContent)")
    assert "Outside" in headers and "Free" in headers and "Declared" in headers, headers
    # No window in this deployment: the warnings section says none holds an ended window's devices.
    assert "No claim holds devices of an ended window." in page.evaluate(
        "document.querySelector('#warnings').textContent")
    page.screenshot(artifacts / "capacity.png")


def test_an_unknown_dashboard_file_is_a_404_naming_it(url):
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(url + "/ui/no-such.js", timeout=10)
    assert e.value.code == 404 and "no-such.js" in json.loads(e.value.read())["error"]["message"]


def test_without_a_token_the_dashboard_asks_for_one_and_a_read_token_opens_it(browser, url, cli):
    """docs/security.md, "The dashboard": the page and its files are open, its reads are not."""
    reader = cli.json("tokens", "create", "dashboard-reader", "--role", "read")["token"]
    browser.clear_cookies()
    try:
        browser.navigate(f"{url}/workloads")
        browser.wait_for("!!document.querySelector('#login')", what="the login form")
        assert browser.evaluate("document.querySelector('#workloads')") is None
        browser.evaluate(f"document.querySelector('#token').value = {json.dumps(reader)}; "
                         "document.querySelector('#login').requestSubmit(); true")
        rows = browser.wait_for(f"(rows => rows.length && rows)({rows_of('#workloads')})",
                                what="the workloads, read with the token typed in")
        assert [r[0] for r in rows] == [WORKLOAD], rows
        # A stale token is asked for again, not shown as a broken page.
        browser.set_cookie(url, "trainer_token", "trn_" + "0" * 64)
        browser.navigate(f"{url}/capacity")
        message = browser.wait_for("(f => f && f.textContent)(document.querySelector('#login'))", what="the login form")
        assert "not known" in message, message
    finally:
        browser.clear_cookies()
        browser.set_cookie(url, "trainer_token", token_for(url))
        browser.take_errors()  # the refused reads were logged as failed requests, as they should be
