"""Traces end to end (docs/traces.md): a real trainerd told of a real trace backend (the
OpenTelemetry Collector v0.161.0 with its OTLP receiver and file exporter, built from the Go
module proxy by tools/build-otelcol) runs real jobs through the real `trainer` CLI; the spans the
collector received are read back from its file exporter, each line parsed strictly as an
ExportTraceServiceRequest (opentelemetry-proto, protobuf's json_format).

An SFT run paused and resumed (two attempts) is one trace: its root span `run`, the service's
`run.pause` and `run.resume`, each attempt's `attempt` with `prepare`, one `step` per step
across both attempts (with its input, forward_backward and optimizer phases), `checkpoint.save`
and `publish` with its reserve, upload and commit, every one of them a descendant of the root.
A GRPO run's steps have generation, reward, old_log_probs and actor_update children. A branch is a
trace of its own linked to its parent's, where a run.branch span and a comparison's span link back
to it. A collector that is down loses spans (said on stderr), never a run."""
from __future__ import annotations

import base64
import json
import pathlib
import signal
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from google.protobuf import json_format
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from cli_support import (MODEL_NAME, Cli, ended, free_port, get_run, plan_text, prepare, snapshot_at, start_trainerd,
                         stop, wait_for, wait_paused, wait_step)
from toy_rl_service import toy_rl_service

REPO = pathlib.Path(__file__).resolve().parents[3]
STEPS = 12
SAVE_EVERY = 4


# ---- the trace backend --------------------------------------------------------------------------

def collector_binary() -> str:
    out = subprocess.run([str(REPO / "tools" / "build-otelcol")], capture_output=True, text=True)
    if out.returncode != 0:
        pytest.fail(f"tools/build-otelcol failed (tools/setup builds it):\n{out.stderr[-3000:]}")
    return out.stdout.strip()


@pytest.fixture(scope="module")
def collector(tmp_path_factory):
    """The collector on a free loopback port: yields (its base URL, the file its spans go to)."""
    folder = tmp_path_factory.mktemp("otelcol")
    port = free_port()
    spans = folder / "traces.jsonl"
    config = folder / "config.yaml"
    config.write_text(f"""receivers:
  otlp:
    protocols:
      http:
        endpoint: 127.0.0.1:{port}
exporters:
  file:
    path: {spans}
    format: json
    flush_interval: 100ms
service:
  telemetry:
    metrics:
      level: none
  pipelines:
    traces:
      receivers: [otlp]
      exporters: [file]
""")
    log = folder / "otelcol.log"
    with open(log, "ab") as out:
        proc = subprocess.Popen([collector_binary(), "--config", str(config)], stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 60
    while True:
        try:
            request = urllib.request.Request(url + "/v1/traces", data=b"{}", method="POST",
                                             headers={"Content-Type": "application/json"})
            with urllib.request.urlopen(request, timeout=5):
                break
        except (urllib.error.URLError, ConnectionError):
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                pytest.fail(f"the collector did not start:\n{log.read_text(errors='replace')}")
            time.sleep(0.2)
    yield url, spans
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def hex_to_base64(value: str) -> str:
    return base64.b64encode(bytes.fromhex(value)).decode() if value else value


def received(path: pathlib.Path) -> list[tuple[dict, object]]:
    """Every span the collector wrote: (its resource's attributes, the Span message)."""
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        doc = json.loads(line)
        # OTLP/JSON writes ids as hex where protobuf's JSON mapping has base64: convert, then parse strictly.
        for rs in doc.get("resourceSpans", []):
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    for key in ("traceId", "spanId", "parentSpanId"):
                        if key in s:
                            s[key] = hex_to_base64(s[key])
                    for link in s.get("links", []):
                        link["traceId"], link["spanId"] = hex_to_base64(link["traceId"]), hex_to_base64(link["spanId"])
        request = ExportTraceServiceRequest()
        json_format.Parse(json.dumps(doc), request)  # strict: an unknown or mistyped field fails
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                out.extend((resource, span) for span in ss.spans)
    return out


def attributes(key_values) -> dict:
    out = {}
    for kv in key_values:
        field = kv.value.WhichOneof("value")
        out[kv.key] = getattr(kv.value, field) if field else None
    return out


class Trace:
    """The spans of one trace, by id, with their parents."""

    def __init__(self, spans: list[tuple[dict, object]], trace_id: bytes):
        self.spans = [(r, s) for r, s in spans if s.trace_id == trace_id]
        self.by_id = {s.span_id: s for _, s in self.spans}

    def named(self, name: str) -> list:
        return [s for _, s in self.spans if s.name == name]

    def ancestors(self, span) -> list[str]:
        """The names from `span`'s parent up to the root (fails on a parent that is missing)."""
        names = []
        while span.parent_span_id:
            assert span.parent_span_id in self.by_id, f"span {span.name}'s parent {span.parent_span_id.hex()} is missing"
            span = self.by_id[span.parent_span_id]
            names.append(span.name)
        return names

    def children(self, span) -> list:
        return [s for _, s in self.spans if s.parent_span_id == span.span_id]


def root_of(path: pathlib.Path, run_id: str):
    roots = [s for _, s in received(path) if s.name == "run" and attributes(s.attributes).get("trainer.run.id") == run_id]
    return roots[0] if len(roots) == 1 else None


def wait_trace(path: pathlib.Path, run_id: str, ready, what: str, timeout: float = 60) -> Trace:
    """The run's trace once its root span arrived and `ready(trace)` holds."""
    found: dict = {}

    def check():
        root = root_of(path, run_id)
        if root is None:
            return False
        trace = Trace(received(path), root.trace_id)
        found["trace"] = trace
        return ready(trace)

    wait_for(check, timeout=timeout, what=what)
    return found["trace"]


def step_numbers(trace: Trace) -> list[int]:
    return sorted(attributes(s.attributes)["trainer.step"] for s in trace.named("step"))


# ---- an SFT run across a pause and a resume ---------------------------------------------------------

@pytest.fixture(scope="module")
def sft_cli(bin_dir, tiny_model, tmp_path_factory, collector):
    url, _ = collector
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                              "telemetry": {"otlpTracesEndpoint": url}})
    try:
        yield prepare(Cli(bin_dir / "trainer", service.url))
    finally:
        stop(service.proc, service.data_dir)


def test_a_paused_and_resumed_run_is_one_trace_with_every_step_under_its_root(sft_cli, collector):
    _, path = collector
    plan = plan_text(STEPS, save_every=SAVE_EVERY)
    run_id = json.loads(sft_cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan, check=True).stdout)["runId"]
    wait_step(sft_cli, run_id, 3)
    sft_cli("runs", "pause", run_id, "--checkpoint", "save", check=True)
    paused = wait_paused(sft_cli, run_id)
    saved = paused["pause"]["savedStep"]
    sft_cli("runs", "resume", run_id, check=True)
    done = ended(sft_cli, run_id)
    assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")

    # Every step once, across both attempts, and both attempts ended (their spans are posted as the jobs exit).
    trace = wait_trace(path, run_id, lambda t: step_numbers(t) == list(range(1, STEPS + 1)) and len(t.named("attempt")) == 2,
                       "every step span and both attempts")
    root = trace.by_id[root_of(path, run_id).span_id]
    assert not root.parent_span_id and root.status.code == root.status.STATUS_CODE_OK
    assert attributes(root.attributes)["trainer.run.outcome"] == "COMPLETED"
    assert attributes(root.attributes)["trainer.run.attempts"] == 2

    # One trace: every span any process exported for this run has the root's trace id.
    everything = received(path)
    for resource, span in everything:
        if resource.get("akka.optimize.training.run.id") == run_id or attributes(span.attributes).get("trainer.run.id") == run_id:
            assert span.trace_id == root.trace_id, span.name
    assert len([s for _, s in everything if s.name == "run" and attributes(s.attributes).get("trainer.run.id") == run_id]) == 1

    # Both attempts under the root; each step under an attempt, its phases under it.
    attempts = sorted(trace.named("attempt"), key=lambda s: attributes(s.attributes)["trainer.run.attempt"])
    assert [attributes(a.attributes)["trainer.run.attempt"] for a in attempts] == [1, 2]
    assert [attributes(a.attributes)["trainer.attempt.outcome"] for a in attempts] == ["paused", "completed"]
    for a in attempts:
        assert a.parent_span_id == root.span_id
    for step in trace.named("step"):
        assert trace.ancestors(step) == ["attempt", "run"]
        assert sorted(c.name for c in trace.children(step)) == ["forward_backward", "input", "optimizer"]
        assert step.start_time_unix_nano <= step.end_time_unix_nano
    by_attempt = {attributes(a.attributes)["trainer.run.attempt"]: a.span_id for a in attempts}
    first = [attributes(s.attributes)["trainer.step"] for s in trace.named("step") if s.parent_span_id == by_attempt[1]]
    assert sorted(first) == list(range(1, saved + 1))  # the rest were trained by the second attempt
    assert len(trace.named("prepare")) == 2

    # The service's operations on the run.
    pauses, resumes = trace.named("run.pause"), trace.named("run.resume")
    assert len(pauses) == 1 and len(resumes) == 1
    assert pauses[0].parent_span_id == root.span_id and resumes[0].parent_span_id == root.span_id
    assert attributes(pauses[0].attributes)["trainer.pause.policy"] == "save"
    assert attributes(pauses[0].attributes)["trainer.step"] == saved
    assert attributes(resumes[0].attributes)["trainer.run.attempt"] == 2
    assert pauses[0].end_time_unix_nano <= resumes[0].start_time_unix_nano

    # Saves and their publication: reserve, upload and commit under each publish.
    saves = trace.named("checkpoint.save")
    assert saved in [attributes(s.attributes)["trainer.step"] for s in saves]
    assert all(trace.ancestors(s) == ["attempt", "run"] for s in saves)
    publishes = trace.named("publish")
    assert publishes and all(p.status.code != p.status.STATUS_CODE_ERROR for p in publishes)
    assert {attributes(p.attributes)["trainer.step"] for p in publishes} >= {saved, STEPS}
    for p in publishes:
        assert trace.ancestors(p) == ["attempt", "run"]
        kinds = sorted(c.name for c in trace.children(p))
        assert "publish.reserve" in kinds and "publish.upload" in kinds and "publish.commit" in kinds, kinds
    assert len(trace.named("export")) == 1


def test_a_run_submitted_while_tracing_has_its_trace_context_in_each_job(sft_cli, collector):
    """The job's environment carries TRACEPARENT naming the run's root span (docs/job-protocol.md)."""
    _, path = collector
    run_id = json.loads(sft_cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan_text(2),
                                check=True).stdout)["runId"]
    done = ended(sft_cli, run_id)
    assert done["phase"] == "COMPLETED", done.get("failureReason")
    trace = wait_trace(path, run_id, lambda t: len(t.named("step")) == 2 and t.named("attempt"), "the short run's steps")
    (attempt,) = trace.named("attempt")
    assert attempt.parent_span_id == root_of(path, run_id).span_id


def test_a_branch_and_a_comparison_are_spans_of_the_parents_trace(sft_cli, collector):
    """The child run has its own trace, its root linked to the parent's; the parent's trace has a
    run.branch span linked to the child's root, and a comparison of the parent's snapshot and the
    branch is a span of the parent's trace too, linked to the branch's root."""
    _, path = collector
    parent_id = json.loads(sft_cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan_text(2),
                                   check=True).stdout)["runId"]
    assert ended(sft_cli, parent_id)["phase"] == "COMPLETED"
    snapshot = snapshot_at(sft_cli, parent_id, 2)["snapshotId"]
    out = sft_cli("runs", "branch", parent_id, "--snapshot", snapshot, "--steps", "1", "--restore", "weights", "-o", "json",
                  check=True)
    child_id = json.loads(out.stdout)["runId"]
    assert ended(sft_cli, child_id)["phase"] == "COMPLETED"
    child = wait_trace(path, child_id, lambda t: t.named("step"), "the child's trace")
    parent = wait_trace(path, parent_id, lambda t: t.named("run.branch"), "the branch span in the parent's trace")
    child_root = root_of(path, child_id)
    parent_root = root_of(path, parent_id)
    assert child_root.trace_id != parent_root.trace_id
    assert [(l.trace_id, l.span_id) for l in child_root.links] == [(parent_root.trace_id, parent_root.span_id)]
    assert attributes(child_root.attributes)["trainer.run.parent_id"] == parent_id
    (branch,) = parent.named("run.branch")
    assert branch.parent_span_id == parent_root.span_id
    assert attributes(branch.attributes)["trainer.child.run_id"] == child_id
    assert attributes(branch.attributes)["trainer.child.kind"] == "branch"
    assert [(l.trace_id, l.span_id) for l in branch.links] == [(child_root.trace_id, child_root.span_id)]
    assert all(trace_ancestors_end_at_root(child, s) for s in child.named("step"))

    # A comparison of the parent's snapshot and the branch: a span of the source run's trace,
    # linked to the branch's root.
    rows = folder_rows(path.parent / "held-out.jsonl", 3)
    sft_cli("datasets", "create", "-f", rows, "--name", "held-out", check=True)
    rule = path.parent / "rule.py"
    rule.write_text("def compute_score(data_source, solution_str, ground_truth, extra_info):\n    return 1.0\n")
    created = sft_cli.json("comparisons", "create", "--source", snapshot, "--branch", child_id, "--dataset", "held-out",
                           "--grader", f"rule:{rule}", "--max-new-tokens", "4")
    done = wait_for(lambda: (c := sft_cli.json("comparisons", "get", created["comparisonId"]))["phase"]
                    in ("COMPLETED", "PARTIAL", "FAILED") and c, timeout=600, what="the comparison to end")
    assert done["phase"] == "COMPLETED", done
    parent = wait_trace(path, parent_id, lambda t: t.named("comparison"), "the comparison's span")
    (comparison,) = parent.named("comparison")
    assert comparison.parent_span_id == parent_root.span_id
    assert attributes(comparison.attributes)["trainer.comparison.id"] == created["comparisonId"]
    assert attributes(comparison.attributes)["trainer.comparison.phase"] == done["phase"]
    assert [(l.trace_id, l.span_id) for l in comparison.links] == [(child_root.trace_id, child_root.span_id)]


def folder_rows(path: pathlib.Path, n: int) -> pathlib.Path:
    """The first `n` rows of the sentiment examples, written to `path`."""
    lines = (REPO / "examples" / "sentiment" / "train.jsonl").read_text().splitlines()[:n]
    path.write_text("\n".join(lines) + "\n")
    return path


def trace_ancestors_end_at_root(trace: Trace, span) -> bool:
    return trace.ancestors(span)[-1] == "run"


def test_a_trainerd_restarted_while_a_run_is_paused_keeps_the_runs_trace(bin_dir, tiny_model, tmp_path_factory,
                                                                          collector):
    """The trace ids live in the run's record: the attempt a restarted trainerd starts joins the same
    trace, and the root span that trainerd exports at the end is the one the first attempt named."""
    url, path = collector
    tmp = tmp_path_factory.mktemp("restarted")
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}], "telemetry": {"otlpTracesEndpoint": url}}
    port = free_port()
    service = start_trainerd(bin_dir, tmp, config, port=port)
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        run_id = json.loads(cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan_text(6, save_every=2, pauseAtStep="2"),
                                check=True).stdout)["runId"]
        wait_paused(cli, run_id)  # the plan pauses it after step 2: a pause asked for then could lose the race to the end
        stop(service.proc, service.data_dir)
        service = start_trainerd(bin_dir, tmp, config, port=port)
        cli("runs", "resume", run_id, check=True)
        done = ended(cli, run_id)
        assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done.get("failureReason")
    finally:
        stop(service.proc, service.data_dir)
    trace = wait_trace(path, run_id, lambda t: step_numbers(t) == list(range(1, 7)) and len(t.named("attempt")) == 2,
                       "both attempts' steps in one trace")
    root = root_of(path, run_id)
    assert all(a.parent_span_id == root.span_id for a in trace.named("attempt"))
    assert all(trace.ancestors(s) == ["attempt", "run"] for s in trace.named("step"))


# ---- a GRPO run's phases ----------------------------------------------------------------------------

RL_MODEL, RL_DATASET, RL_WORKLOAD = "toy-policy", "toy-tickets", "rl-traces"


def test_an_rl_steps_phases_are_its_children(bin_dir, tmp_path_factory, collector):
    url, path = collector
    with toy_rl_service(bin_dir, tmp_path_factory, model=RL_MODEL, dataset=RL_DATASET, workload=RL_WORKLOAD,
                        config={"telemetry": {"otlpTracesEndpoint": url}}) as (_, cli):
        plan = "\n".join([
            "kind: run", f"workload: {RL_WORKLOAD}", f"baseModel: {RL_MODEL}", "config:", f"  dataset: {RL_DATASET}",
            "  method: grpo", "  maxSeqLength: 64", "  model: {precision: FP32}",
            "  hyperparams:", "    lora: {rank: 8, alpha: 16}", "    training: {maxSteps: 3, seed: 3}",
            "  reward: {terms: [{kind: json-label-match}]}",
            "  rlHyperparams:", "    groupSize: 4", "    promptsPerStep: 2", "    maxCompletionLength: 6",
            "    microBatchSize: 32", "    optimizer: {learningRate: 0.006, schedule: constant}",
            "execution: {gpus: 0}"]) + "\n"
        run_id = json.loads(cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan, check=True).stdout)["runId"]
        done = ended(cli, run_id)
        assert done["phase"] == "COMPLETED", done.get("failureReason")
        assert get_run(cli, run_id)["method"] == "grpo"
    trace = wait_trace(path, run_id, lambda t: step_numbers(t) == [1, 2, 3] and t.named("attempt"), "the RL run's steps")
    for step in trace.named("step"):
        assert trace.ancestors(step) == ["attempt", "run"]
        children = sorted(trace.children(step), key=lambda c: (c.start_time_unix_nano, c.end_time_unix_nano))
        assert sorted(c.name for c in children) == ["actor_update", "generation", "old_log_probs", "reward"]
        for c in children:
            assert step.start_time_unix_nano <= c.start_time_unix_nano <= c.end_time_unix_nano <= step.end_time_unix_nano


# ---- a collector that is down -------------------------------------------------------------------

def test_a_collector_that_is_down_loses_spans_not_runs(bin_dir, tiny_model, tmp_path_factory):
    """Nothing listens at the traces endpoint: the run completes as ever, and trainerd and the job
    each say on stderr that spans were dropped."""
    url = f"http://127.0.0.1:{free_port()}"
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                              "telemetry": {"otlpTracesEndpoint": url}})
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        run_id = json.loads(cli("runs", "start", "-f", "-", "--force", "-o", "json", input=plan_text(2),
                                check=True).stdout)["runId"]
        done = ended(cli, run_id)
        assert done["phase"] == "COMPLETED", done.get("failureReason")
        job_log = next(service.data_dir.glob(f"runs/{run_id}/attempt-1/job.log"))
        wait_for(lambda: "warning: traces: posting spans to " + url + "/v1/traces failed" in job_log.read_text(),
                 timeout=30, what="the job's warning of its dropped spans")
        wait_for(lambda: "warning: traces: posting spans to " + url + "/v1/traces failed" in service.log_text(),
                 timeout=30, what="trainerd's warning of its dropped spans")
    finally:
        stop(service.proc, service.data_dir)
