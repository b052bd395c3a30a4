"""`trainer sessions create` (issue 26) through the real CLI against a real trainerd: an OASST1 tree
file made here (branches, deleted and non-English messages), a real OTLP/JSON logs export written
through the opentelemetry-sdk's logs pipeline and its OTLP encoder, and canonical captured calls;
each session's candidate and dropped counts equal a count made here independently of trainerd.
The same bytes again are the same session and store nothing new; bad lines are refused by line
and field; stdin is refused."""
from __future__ import annotations

import base64
import hashlib
import json
import pathlib
import random

import pytest
from google.protobuf import json_format

from cli_support import Cli, call, start_trainerd, stop


@pytest.fixture(scope="module")
def svc(bin_dir, tmp_path_factory):
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"), {})
    yield service
    stop(service.proc, service.data_dir)


@pytest.fixture(scope="module")
def cli(bin_dir, svc) -> Cli:
    return Cli(bin_dir / "trainer", svc.url)


# ---- OASST1: trees made here, and an independent walk over them

def oasst1_trees(seed: int, count: int) -> list[dict]:
    rng = random.Random(seed)
    serial = iter(range(10 ** 6))

    def message(role: str, depth: int) -> dict:
        m = {"message_id": f"m{next(serial)}", "role": role, "text": f"{role} text {rng.random():.6f}",
             "lang": rng.choice(["en"] * 6 + ["de", "es"]), "deleted": rng.random() < 0.12, "replies": []}
        if depth < 4:
            m["replies"] = [message("assistant" if role == "prompter" else "prompter", depth + 1)
                            for _ in range(rng.randint(0 if depth else 1, 3))]
        return m

    return [{"message_tree_id": f"t{i}", "tree_state": "ready_for_export", "prompt": message("prompter", 0)}
            for i in range(count)]


def oasst1_counts(trees: list[dict]) -> tuple[int, dict]:
    kept, dropped = 0, {}

    def walk(m: dict, deleted: bool, foreign: bool):
        nonlocal kept
        deleted = deleted or m["deleted"]
        foreign = foreign or m["lang"] != "en"
        if m["role"] == "assistant":
            why = "deleted" if deleted else "non_english" if foreign else None
            if why:
                dropped[why] = dropped.get(why, 0) + 1
            else:
                kept += 1
        for r in m["replies"]:
            walk(r, deleted, foreign)

    for t in trees:
        walk(t["prompt"], False, False)
    return kept, dropped


def test_an_oasst1_file_gives_every_prompter_assistant_path_and_the_same_bytes_store_nothing_new(cli, svc, tmp_path):
    trees = oasst1_trees(seed=7, count=25)
    kept, dropped = oasst1_counts(trees)
    assert kept > 10 and dropped.get("deleted") and dropped.get("non_english")  # the file exercises each case
    path = tmp_path / "trees.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in trees))

    out = cli("sessions", "create", "-f", path, "--source", "oasst1", check=True)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    assert out.stdout == digest + "\n", out.stdout  # the hash alone on stdout
    assert f"{kept} candidates" in out.stderr, out.stderr
    session = cli.json("sessions", "create", "-f", path, "--source", "oasst1")
    assert (session["hash"], session["source"], session["candidates"]) == (digest, "oasst1", kept)
    assert session["dropped"] == dropped
    assert call(f"{svc.url}/v1/sessions/{digest}") == (200, session)
    status, answer = call(f"{svc.url}/v1/sessions/{'0' * 64}")
    assert status == 404 and answer["error"]["field"] == "session", answer
    stored = sorted(p.name for p in (svc.data_dir / "sessions").iterdir())
    again = cli("sessions", "create", "-f", path, "--source", "oasst1", check=True)
    assert again.stdout == digest + "\n" and "Already stored" in again.stderr, again.stderr
    assert sorted(p.name for p in (svc.data_dir / "sessions").iterdir()) == stored == [digest]
    # The same bytes under another source are refused, naming the source.
    out = cli("sessions", "create", "-f", path, "--source", "canonical")
    assert out.returncode == 1 and "source" in out.stderr and "oasst1" in out.stderr, out.stderr


# ---- OTel: an export written through the SDK's logs pipeline

def otel_export(path: pathlib.Path) -> tuple[int, dict]:
    """Writes captured calls as the GenAI conventions' events through the opentelemetry-sdk (a
    LoggerProvider whose processor hands batches to an exporter encoding them with the OTLP
    encoder, one ExportLogsServiceRequest per line in OTLP/JSON); returns the candidates and
    dropped counts the export holds, counted from what was emitted."""
    from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, LogRecordExporter, LogRecordExportResult
    from opentelemetry.sdk.trace import TracerProvider

    lines: list[str] = []

    class OtlpJsonFileExporter(LogRecordExporter):
        def export(self, batch):
            doc = json_format.MessageToDict(encode_logs(batch))
            for rl in doc.get("resourceLogs", []):  # OTLP/JSON writes trace and span ids as hex
                for sl in rl.get("scopeLogs", []):
                    for rec in sl.get("logRecords", []):
                        for key in ("traceId", "spanId"):
                            if key in rec:
                                rec[key] = base64.b64decode(rec[key]).hex()
            lines.append(json.dumps(doc))
            return LogRecordExportResult.SUCCESS

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return True

        def shutdown(self):
            pass

    logs = LoggerProvider()
    logs.add_log_record_processor(BatchLogRecordProcessor(OtlpJsonFileExporter(), max_export_batch_size=7))
    logger = logs.get_logger("captured-calls")
    tracer = TracerProvider().get_tracer("captured-calls")
    rng = random.Random(3)
    kept, dropped = 0, {}

    def event(name: str, body: dict):
        logger.emit(event_name=name, body=body, attributes={"gen_ai.system": "openai"})

    for i in range(30):
        with tracer.start_as_current_span(f"chat {i}"):
            if rng.random() < 0.5:
                event("gen_ai.system.message", {"content": "You are a support agent."})
            event("gen_ai.user.message", {"content": f"question {i}"})
            if rng.random() < 0.3:
                event("gen_ai.assistant.message", {"content": f"earlier answer {i}"})
                event("gen_ai.user.message", {"content": f"follow-up {i}"})
            shape = rng.random()
            if shape < 0.15:  # the call failed: no choice
                dropped["no_choice"] = dropped.get("no_choice", 0) + 1
                continue
            event("gen_ai.choice", {"index": 0, "finish_reason": "stop",
                                    "message": {"role": "assistant", "content": f"answer {i}"}})
            kept += 1
            if shape > 0.85:  # n > 1: a second choice, left out
                event("gen_ai.choice", {"index": 1, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": f"other answer {i}"}})
                dropped["other_choices"] = dropped.get("other_choices", 0) + 1
            if shape > 0.8:  # a plain log line of the same span
                logger.emit(body=f"request {i} took 12 ms")
                dropped["not_gen_ai"] = dropped.get("not_gen_ai", 0) + 1
    logs.force_flush()
    logs.shutdown()
    path.write_text("".join(line + "\n" for line in lines))
    assert len(lines) > 3  # calls' events span export batches
    return kept, dropped


def test_an_otlp_json_export_written_by_the_sdk_gives_one_candidate_per_answered_call(cli, tmp_path):
    path = tmp_path / "calls.otlp.jsonl"
    kept, dropped = otel_export(path)
    session = cli.json("sessions", "create", "-f", path, "--source", "otel")
    assert session["candidates"] == kept and session["dropped"] == dropped, (session, kept, dropped)
    assert session["hash"] == hashlib.sha256(path.read_bytes()).hexdigest()


# ---- canonical captured calls, and bad lines

def row(question: str, answer: str, **extra) -> str:
    return json.dumps({"messages": [{"role": "user", "content": question}, {"role": "assistant", "content": answer}],
                       **extra}) + "\n"


def test_canonical_calls_with_incomplete_provenance_are_dropped(cli, tmp_path):
    path = tmp_path / "calls.jsonl"
    path.write_text(row("a", "b", provenance={"complete": True, "source": "gateway"}) +
                    row("c", "d", provenance={"complete": False}) + row("e", "f") +
                    row("g", "h", provenance={"complete": False}))
    session = cli.json("sessions", "create", "-f", path, "--source", "canonical")
    assert (session["candidates"], session["dropped"]) == (2, {"incomplete_provenance": 2}), session


def test_bad_lines_are_named_by_line_and_field_and_nothing_is_stored(cli, svc, tmp_path):
    before = sorted(p.name for p in (svc.data_dir / "sessions").iterdir()) if (svc.data_dir / "sessions").exists() else []
    path = tmp_path / "bad.jsonl"
    path.write_text(row("a", "b") + json.dumps({"messages": [{"role": "robot", "content": "x"}]}) + "\n" +
                    "{not json\n" + row("c", "d", provenance={"complete": "yes"}))
    out = cli("sessions", "create", "-f", path, "--source", "canonical")
    assert out.returncode == 1, out.stdout
    for expected in ("line 2: messages[0].role", "line 3, column", "line 4: provenance.complete"):
        assert expected in out.stderr, out.stderr
    trees = tmp_path / "trees.jsonl"
    trees.write_text(json.dumps({"prompt": {"role": "prompter", "text": "q", "replies": [
        {"role": "assistant", "text": "a", "replies": [{"role": "assistant", "text": "again"}]}]}}) + "\n")
    out = cli("sessions", "create", "-f", trees, "--source", "oasst1")
    assert out.returncode == 1 and "line 1: prompt.replies[0].replies[0].role" in out.stderr, out.stderr
    export = tmp_path / "bad.otlp.jsonl"
    export.write_text(json.dumps({"resourceLogs": [{"scopeLogs": [{"logRecords": [
        {"eventName": "gen_ai.user.message", "traceId": "ab", "spanId": "cd",
         "body": {"kvlistValue": {"values": [{"key": "content", "value": {"intValue": "many"}}]}}}]}]}]}) + "\n")
    out = cli("sessions", "create", "-f", export, "--source", "otel")
    assert out.returncode == 1, out.stdout
    assert "line 1: resourceLogs[0].scopeLogs[0].logRecords[0].body.kvlistValue.values[0].value.intValue" in out.stderr
    after = sorted(p.name for p in (svc.data_dir / "sessions").iterdir()) if (svc.data_dir / "sessions").exists() else []
    assert after == before


def test_stdin_and_a_missing_source_are_refused(cli, tmp_path):
    out = cli("sessions", "create", "-f", "-", "--source", "canonical", input=row("a", "b"))
    assert out.returncode == 2 and "not stdin" in out.stderr, out.stderr
    path = tmp_path / "calls.jsonl"
    path.write_text(row("a", "b"))
    out = cli("sessions", "create", "-f", path)
    assert out.returncode == 2 and "--source" in out.stderr, out.stderr
    out = cli("sessions", "create", "--source", "canonical")
    assert out.returncode == 2 and "-f FILE" in out.stderr, out.stderr
    out = cli("sessions", "create", "-f", path, "--source", "sharegpt")
    assert out.returncode == 1 and "source" in out.stderr and "oasst1, otel or canonical" in out.stderr, out.stderr
