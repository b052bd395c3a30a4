"""`trainer distillations` (issue 26) through the real CLI against a real trainerd and a real HTTP
teacher written here: an OpenAI-compatible /v1/chat/completions that answers each decision
deterministically, counts its calls per decision, can hold calls until released and gives bad
answers for chosen decisions. A distillation to COMPLETED registers exactly the teacher's answers
in place of the assistant turns; a failed smoke pass registers nothing and asked only the smoke
decisions; pause then resume asks no decision of a stored chunk twice; a trainerd SIGKILLed mid-run
completes after a restart, re-asking at most one chunk; cancel registers nothing; bad input is
refused naming the field and creates nothing. The teacher is distillation_support.py's."""
from __future__ import annotations

import json
import re
import signal
import urllib.request

import pytest

from cli_support import Cli, call, start_trainerd, stop, wait_for
from distillation_support import TOOLS, Teacher, answer_of, config, source_rows, teacher  # noqa: F401 (teacher: a fixture)

WORKLOAD = "support"


def decisions_of(rows) -> list[tuple[int, int]]:
    return [(r, m) for r, row in enumerate(rows) for m, msg in enumerate(row["messages"]) if msg["role"] == "assistant"]


def expected_rows(rows, bad) -> list[dict]:
    """Each row up to its first rejected decision, the teacher's answers in place of the source's
    turns (a tool call keeps the source's call id, so the tool message after it still answers it)."""
    out = []
    for r, row in enumerate(rows):
        messages, keep = [], 0
        for m, msg in enumerate(row["messages"]):
            if msg["role"] != "assistant":
                messages.append(msg)
                continue
            if (r, m) in bad:
                break
            before = row["messages"][m - 1]
            answer = answer_of((r, m), "tools" in row, before["role"] == "user" and "call lookup" in before["content"])
            answer["content"] = answer["content"] or ""
            if "tool_calls" in answer:
                answer["tool_calls"][0]["id"] = msg["tool_calls"][0]["id"]
            messages.append(answer)
            keep = len(messages)
        if keep:
            out.append({**row, "messages": messages[:keep]})
    return out


def setup(bin_dir, teacher, tmp_path, n_rows: int):
    svc = start_trainerd(bin_dir, tmp_path / "svc", config(teacher))
    cli = Cli(bin_dir / "trainer", svc.url)
    rows = source_rows(n_rows)
    path = tmp_path / "calls.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cli("workloads", "create", WORKLOAD, check=True)
    cli("datasets", "create", "-f", path, "--name", "calls", check=True)
    return svc, cli, rows


def create(cli: Cli, *more) -> dict:
    return cli.json("distillations", "create", "--workload", WORKLOAD, "--teacher", "teacher-model",
                    "--from", "calls", "--to", "distilled", "--force", *more)


def dataset_rows(svc, cli: Cli, name: str) -> list[dict]:
    d = cli.json("datasets", "get", name)
    return [json.loads(line) for line in (svc.data_dir / "datasets" / f"{d['hash']}.jsonl").read_text().splitlines()]


def progress(cli: Cli, ident: str) -> dict:
    return cli.json("distillations", "get", ident)["progress"]


def test_a_distillation_registers_the_teachers_answers_in_place_of_the_assistant_turns(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 21)
    try:
        decisions = decisions_of(rows)  # 42: the smoke pass's 16, then one chunk of 26
        teacher.bad = {(2, 1), (10, 3)}  # one in the smoke pass (allowed), one after it
        teacher.odd = {(12, 1): {"message": {"role": "assistant", "content": None,  # a row without tools
                                             "tool_calls": [{"id": "x", "type": "function",
                                                             "function": {"name": "delete_all", "arguments": "{}"}}]}},
                       (14, 3): {"finish_reason": "length"}}
        started = create(cli, "--replicas", "3", "--max-tokens", "256", "--temperature", "0.5", "--top-p", "0.9",
                         "--seed", "7", "--instructions", "Answer as the ACME agent.")
        ident = started["distillationId"]
        assert re.fullmatch(r"[0-9a-f]{12}", ident) and started["phase"] in ("PENDING", "SMOKE_TEST"), started
        done = cli.json("distillations", "wait", ident[:6], "--exit-status", timeout=300)
        assert done["phase"] == "COMPLETED", done
        assert done["progress"] == {"decisions": {"total": 42, "answered": 42, "accepted": 38, "rejected": 4},
                                    "chunks": {"stored": 2, "total": 2}}
        assert done["smokeResult"] == {"decisions": 16, "accepted": 15, "rejected": 1, "passed": True}
        assert dataset_rows(svc, cli, "distilled") == expected_rows(rows, teacher.bad | set(teacher.odd))
        assert done["result"]["dataset"]["hash"] == cli.json("datasets", "get", "distilled")["hash"]
        assert teacher.answered == {d: 1 for d in decisions}  # every decision asked once
        # The request: the history before the decision after the instructions, the row's tools, the sampling.
        first = teacher.requests[(0, 1)]
        assert first["messages"] == [{"role": "system", "content": "Answer as the ACME agent."}, rows[0]["messages"][0]]
        assert first["tools"] == TOOLS and "tools" not in teacher.requests[(1, 3)]
        assert teacher.requests[(1, 3)]["messages"][1:] == rows[1]["messages"][:3]
        assert {k: first[k] for k in ("model", "max_tokens", "temperature", "top_p", "seed")} == {
            "model": "big-model", "max_tokens": 256, "temperature": 0.5, "top_p": 0.9, "seed": 7}

        rejected = cli.json("distillations", "rejections", ident)
        assert [(x["row"], x["message"], x["reason"].split(":")[0]) for x in rejected["rejections"]] == [
            (2, 1, "empty"), (10, 3, "empty"), (12, 1, "unknown_tool"), (14, 3, "truncated")]
        assert "'delete_all'" in rejected["rejections"][2]["reason"]
        limited = cli.json("distillations", "rejections", ident, "--limit", "1")
        assert len(limited["rejections"]) == 1 and limited["total"] == 4
        text = cli("distillations", "rejections", ident, check=True).stdout
        assert "2:1" in text and "10:3" in text
        listed = cli.json("distillations", "list")["distillations"]
        assert [d["distillationId"] for d in listed] == [ident]
        assert "COMPLETED" in cli("distillations", "get", ident, "--follow", "--exit-status", check=True).stdout
        out = cli("distillations", "pause", ident)
        assert out.returncode == 1 and "has ended" in out.stderr, out.stderr
    finally:
        stop(svc.proc, svc.data_dir)


def test_a_failed_smoke_pass_registers_nothing_and_asks_only_the_smoke_decisions(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 21)
    try:
        decisions = decisions_of(rows)
        teacher.bad = {(3, 1), (5, 3)}  # two of the first 16: one too many
        ident = create(cli)["distillationId"]
        out = cli("distillations", "wait", ident, "--exit-status", timeout=300)
        assert out.returncode == 3, out.stdout + out.stderr
        failed = cli.json("distillations", "get", ident)
        assert failed["phase"] == "FAILED" and "smoke pass failed" in failed["failureReason"], failed
        assert "3:1" in failed["failureReason"] and "5:3" in failed["failureReason"]
        assert sorted(teacher.answered) == sorted(decisions[:16])
        assert cli("datasets", "get", "distilled").returncode == 1

        # An explicit smoke list: every listed decision must be accepted; only they are asked.
        teacher.answered.clear()
        ident = create(cli, "--smoke", "4:1,5:3,7:3")["distillationId"]
        out = cli("distillations", "wait", ident, "--exit-status", timeout=300)
        assert out.returncode == 3
        failed = cli.json("distillations", "get", ident)
        assert "every listed one must be accepted" in failed["failureReason"] and "5:3" in failed["failureReason"]
        assert sorted(teacher.answered) == [(4, 1), (5, 3), (7, 3)]
        assert cli("datasets", "get", "distilled").returncode == 1
    finally:
        stop(svc.proc, svc.data_dir)


def test_pause_stops_after_the_chunk_in_flight_and_resume_asks_no_stored_decision_again(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 41)
    try:
        decisions = decisions_of(rows)  # 82: 16, then 32, 32 and 2
        teacher.hold_after = 16 + 10
        ident = create(cli)["distillationId"]
        wait_for(lambda: teacher.asked_count() == 27, 120, "a call held in the first chunk after the smoke pass")
        paused = cli.json("distillations", "pause", ident)
        assert paused["phase"] == "PAUSED", paused
        teacher.release()
        wait_for(lambda: progress(cli, ident)["chunks"]["stored"] == 2, 120, "the chunk in flight stored")
        assert cli.json("distillations", "get", ident)["phase"] == "PAUSED"
        assert teacher.asked_count() == 48  # the chunk in flight finished; the next one not started
        assert cli.json("distillations", "pause", ident)["phase"] == "PAUSED"  # again: the same
        out = cli("distillations", "wait", ident, "--timeout", "1s")
        assert out.returncode == 5, out.stderr  # waiting goes on through a pause
        assert cli.json("distillations", "resume", ident)["phase"] == "DISTILLING"
        done = cli.json("distillations", "wait", ident, "--exit-status", timeout=300)
        assert done["phase"] == "COMPLETED" and done["progress"]["chunks"] == {"stored": 4, "total": 4}, done
        assert teacher.answered == {d: 1 for d in decisions}
        assert len(teacher.asked) == len(decisions)
        assert dataset_rows(svc, cli, "distilled") == expected_rows(rows, set())
        out = cli("distillations", "resume", ident)
        assert out.returncode == 1 and "has ended" in out.stderr
    finally:
        stop(svc.proc, svc.data_dir)


def test_trainerd_killed_mid_run_completes_after_a_restart_reasking_at_most_one_chunk(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 41)
    try:
        decisions = decisions_of(rows)
        teacher.hold_after = 16 + 32 + 5
        ident = create(cli, "--replicas", "4")["distillationId"]
        wait_for(lambda: progress(cli, ident)["chunks"]["stored"] == 2, 120, "two chunks stored")
        wait_for(lambda: teacher.asked_count() > 53, 60, "calls held in the third chunk")
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait(timeout=30)
        teacher.restart()
        svc = start_trainerd(bin_dir, tmp_path / "svc", config(teacher))
        cli = Cli(bin_dir / "trainer", svc.url)
        done = cli.json("distillations", "wait", ident, "--exit-status", timeout=300)
        assert done["phase"] == "COMPLETED" and done["attempt"] >= 2, done
        stored_before = set(decisions[:48])  # the smoke pass and the first chunk after it
        asked_again = {d for g, d in teacher.asked if g == 1} & {d for g, d in teacher.asked if g == 0}
        assert not asked_again & stored_before
        assert asked_again <= set(decisions[48:80]) and len(asked_again) <= 32
        assert set(teacher.answered) == set(decisions)
        assert dataset_rows(svc, cli, "distilled") == expected_rows(rows, set())
    finally:
        stop(svc.proc, svc.data_dir)


def test_cancel_ends_a_distillation_without_registering_anything(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 21)
    try:
        teacher.hold_after = 20
        ident = create(cli)["distillationId"]
        wait_for(lambda: teacher.asked_count() == 21, 120, "a call held after the smoke pass")
        cancelled = cli.json("distillations", "cancel", ident, "--force")
        assert cancelled["phase"] == "CANCELLED" and cancelled["endedAt"], cancelled
        teacher.release()
        out = cli("distillations", "wait", ident, "--exit-status")
        assert out.returncode == 3 and "CANCELLED" in out.stdout
        for verb in ("pause", "resume", "cancel"):
            out = cli("distillations", verb, ident, "--force") if verb == "cancel" else cli("distillations", verb, ident)
            assert out.returncode == 1 and "ended" in out.stderr, (verb, out.stderr)
        status, answer = call(f"{svc.url}/v1/distillations/{ident}/resume", "POST", {})
        assert status == 409 and answer["error"]["field"] == "distillation", answer
        assert cli("datasets", "get", "distilled").returncode == 1
        assert cli.json("distillations", "get", ident)["result"] is None
    finally:
        stop(svc.proc, svc.data_dir)


def test_bad_distillation_requests_are_refused_naming_the_field_and_create_nothing(bin_dir, teacher, tmp_path):
    svc, cli, rows = setup(bin_dir, teacher, tmp_path, 3)
    try:
        base = ["--workload", WORKLOAD, "--teacher", "teacher-model", "--from", "calls", "--to", "distilled", "--force"]

        def swap(flag, value):
            args = list(base)
            if flag in args:
                args[args.index(flag) + 1] = value
            else:
                args += [flag, value]
            return args

        cases = [
            (swap("--from", "nope"), "from"),
            (swap("--teacher", "nobody"), "teacher"),
            (swap("--workload", "nowhere"), "workload"),
            (swap("--to", "Not A Name"), "to"),
            (swap("--smoke", "0-1"), "smoke[0]"),
            (swap("--smoke", "1:1,1:0"), "smoke[1]"),
            (swap("--smoke", "9:1"), "smoke[0]"),
            (swap("--smoke", "1:1,1:1"), "smoke[1]"),
            (swap("--replicas", "0"), "replicas"),
            (swap("--temperature", "3"), "temperature"),
        ]
        for args, field in cases:
            out = cli("distillations", "create", *args)
            assert out.returncode == 1 and field in out.stderr, (args, out.stderr)
        out = cli("distillations", "create", *swap("--seed", "many"))
        assert out.returncode == 2 and "--seed" in out.stderr, out.stderr
        out = cli("distillations", "create", *base[:-1])  # no --force, no terminal: asks nothing, starts nothing
        assert out.returncode == 2, out.stderr
        body = {"workload": WORKLOAD, "teacher": "teacher-model", "from": "calls", "to": "distilled"}
        for extra, field, code in [({"from": "nope"}, "from", 404), ({"smoke": ["x"]}, "smoke[0]", 400),
                                   ({"topP": 0}, "topP", 400), ({"cancel": True}, "cancel", 400)]:
            status, answer = call(f"{svc.url}/v1/distillations", "POST", {**body, **extra})
            assert (status, answer["error"].get("field")) == (code, field), (extra, answer)
        assert cli.json("distillations", "list")["distillations"] == []
        assert teacher.asked == []
        out = cli("distillations", "get", "abc")
        assert out.returncode == 1 and "abc" in out.stderr
    finally:
        stop(svc.proc, svc.data_dir)


@pytest.mark.timeout(1500)
def test_a_model_served_at_one_of_our_endpoints_teaches(bin_dir, tmp_path_factory):
    """The teacher is the tiny toy policy served at our own endpoint: the calls go through
    trainerd's forwarding, and the registered rows hold what the endpoint answers each decision
    (greedy, asked again directly with the same request). Until the distillation ends, its
    teacher's endpoint refuses to go."""
    from toy_rl_service import toy_rl_service
    from rl_toy import toy_rows

    config = {"pools": [{"name": "cpu", "accelerator": "cpu", "declared": 1, "maxClaim": 1}]}
    with toy_rl_service(bin_dir, tmp_path_factory, model="toy-teacher", dataset="tickets", workload=WORKLOAD,
                        rows=3, config=config) as (svc, cli):
        eid = cli.json("endpoints", "create", "--model", "toy-teacher", "--workload", WORKLOAD, "--wait",
                       "--timeout", "10m", timeout=700)["endpointId"]
        ident = cli.json("distillations", "create", "--workload", WORKLOAD, "--teacher", "toy-teacher",
                         "--from", "tickets", "--to", "taught", "--temperature", "0", "--max-tokens", "24",
                         "--force")["distillationId"]
        # While it has not ended (paused here, so that it cannot end meanwhile), the endpoint that
        # teaches it cannot be taken down, nor its model detached or disabled.
        assert cli.json("distillations", "pause", ident)["phase"] == "PAUSED"
        for args in (("delete", eid), ("detach", eid, "toy-teacher"), ("disable", eid, "toy-teacher")):
            out = cli("endpoints", *args)
            assert out.returncode == 1 and f"called by distillation {ident}" in out.stderr, (args, out.stderr)
        assert cli.json("endpoints", "get", eid)["phase"] == "READY"
        cli("distillations", "resume", ident, check=True)
        done = cli.json("distillations", "wait", ident, "--exit-status", timeout=900)
        assert done["phase"] == "COMPLETED", done
        forwarded = forwarded_requests(svc.url, eid, "toy-teacher")
        assert forwarded >= 3  # the teacher's calls went through trainerd's forwarding
        choices = []
        for row in toy_rows(3):
            status, answer = call(f"{svc.url}/v1/endpoints/{eid}/v1/chat/completions", "POST",
                                  {"model": "toy-teacher", "messages": row["messages"][:1], "max_tokens": 24,
                                   "temperature": 0, "top_p": 1.0, "seed": 0}, timeout=300)
            assert status == 200, answer
            choices.append(answer["choices"][0])
        # The toy policy answers each ticket briefly and whole: every decision is accepted.
        assert all(c.get("finish_reason") != "length" and c["message"]["content"].strip() for c in choices), choices
        assert done["progress"]["decisions"] == {"total": 3, "answered": 3, "accepted": 3, "rejected": 0}, done
        assert dataset_rows(svc, cli, "taught") == [
            {"messages": [row["messages"][0], {"role": "assistant", "content": c["message"]["content"]}]}
            for row, c in zip(toy_rows(3), choices)]
        assert forwarded_requests(svc.url, eid, "toy-teacher") == forwarded + 3


def forwarded_requests(url: str, endpoint: str, model: str) -> float:
    """trainer_endpoint_requests_total of `model` at `endpoint` answered ok, from /metrics."""
    text = urllib.request.urlopen(url + "/metrics", timeout=10).read().decode()
    series = f'trainer_endpoint_requests_total{{endpoint="{endpoint}",model="{model}",outcome="ok"}} '
    found = [line for line in text.splitlines() if line.startswith(series)]
    return float(found[0].split()[-1]) if found else 0.0
