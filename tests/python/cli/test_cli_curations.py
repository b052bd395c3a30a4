"""`trainer curations` (issue 26) through the real CLI against a real trainerd and a real HTTP judge
(curation_support.py: deterministic scores, counting its calls per candidate): the registered
dataset version holds exactly the candidates scored at or above the threshold; a trainerd SIGKILLed
mid-curation resumes and completes, and no candidate gets a second verdict; the same curationId
again is the same curation, with another request it is refused; bad requests are refused naming
the field and start nothing."""
from __future__ import annotations

import json
import signal

from cli_support import Cli, call, start_trainerd, stop, wait_for
from curation_support import THRESHOLD, canonical, config, judge, score_of  # noqa: F401 (judge: a fixture)


def request(curation_id: str, hashes: list[str], **over) -> dict:
    return {"curationId": curation_id, "sessionHashes": hashes, "source": "canonical", "threshold": THRESHOLD,
            "dataset": "support", "systemPrompt": "You are a support agent.", "judge": "test-judge", **over}


def dataset_rows(svc, cli: Cli, name: str) -> list[dict]:
    d = cli.json("datasets", "get", name)
    return [json.loads(line) for line in (svc.data_dir / "datasets" / f"{d['hash']}.jsonl").read_text().splitlines()]


def test_a_curation_registers_exactly_the_candidates_at_or_above_the_threshold_and_is_idempotent(
        bin_dir, judge, tmp_path):
    svc = start_trainerd(bin_dir, tmp_path / "svc", config(judge))
    try:
        cli = Cli(bin_dir / "trainer", svc.url)
        one, answers_one = canonical(tmp_path, "one.jsonl", range(0, 12))
        two, answers_two = canonical(tmp_path, "two.jsonl", range(12, 20))
        hashes = [cli("sessions", "create", "-f", f, "--source", "canonical", check=True).stdout.strip()
                  for f in (one, two)]
        answers = answers_one + answers_two
        req = tmp_path / "curation.json"
        req.write_text(json.dumps(request("cur-1", hashes)))
        done = cli.json("curations", "apply", "-f", req, "--wait", "--exit-status")
        kept = [a for a in answers if score_of(a) >= THRESHOLD]
        assert 0 < len(kept) < len(answers)
        assert done["phase"] == "COMPLETED", done
        assert done["progress"] == {"judged": len(answers), "total": len(answers)}
        assert (done["accepted"], done["rejected"]) == (len(kept), len(answers) - len(kept))
        assert sorted((r["score"], r["session"], r["index"]) for r in done["rejections"]) == sorted(
            (score_of(a), hashes[i >= 12], i if i < 12 else i - 12) for i, a in enumerate(answers)
            if score_of(a) < THRESHOLD)
        rows = dataset_rows(svc, cli, "support")
        assert [r["messages"][-1]["content"] for r in rows] == kept
        assert all(r["messages"][0] == {"role": "system", "content": "You are a support agent."} for r in rows)
        assert done["result"]["dataset"]["hash"] == cli.json("datasets", "get", "support")["hash"]
        assert judge.verdicts == {a: 1 for a in answers}  # each candidate judged once

        # The same request again: the same curation, nothing judged again; from stdin too.
        again = cli.json("curations", "apply", "-f", "-", input=json.dumps(request("cur-1", hashes)))
        assert (again["curationId"], again["phase"], again["createdAt"]) == ("cur-1", "COMPLETED", done["createdAt"])
        assert judge.verdicts == {a: 1 for a in answers}
        # Another request under the same id is refused, naming the id and what differs.
        out = cli("curations", "apply", "-f", "-", input=json.dumps(request("cur-1", hashes, threshold=0.9)))
        assert out.returncode == 1 and "cur-1" in out.stderr and "threshold" in out.stderr, out.stderr
        status, answer = call(f"{svc.url}/v1/curations", "POST", request("cur-1", hashes, threshold=0.9))
        assert status == 409 and answer["error"]["field"] == "curationId", answer

        listed = cli.json("curations", "list")["curations"]
        assert [c["curationId"] for c in listed] == ["cur-1"] and "rejections" not in listed[0]
        text = cli("curations", "get", "cur-1", check=True).stdout
        assert "phase: COMPLETED" in text and f"judged: {len(answers)}" in text, text
        waited = cli("curations", "wait", "cur-1", "--exit-status", check=True).stdout
        assert "COMPLETED" in waited
    finally:
        stop(svc.proc, svc.data_dir)


def test_trainerd_killed_mid_curation_resumes_without_judging_any_candidate_twice(bin_dir, judge, tmp_path):
    svc = start_trainerd(bin_dir, tmp_path / "svc", config(judge))
    try:
        cli = Cli(bin_dir / "trainer", svc.url)
        path, answers = canonical(tmp_path, "calls.jsonl", range(40))
        digest = cli("sessions", "create", "-f", path, "--source", "canonical", check=True).stdout.strip()
        judge.hold_after = 13  # the judge answers 13 calls, then holds every further one
        started = cli.json("curations", "apply", "-f", "-", input=json.dumps(request("cur-kill", [digest])))
        assert started["phase"] in ("PENDING", "JUDGING"), started
        # Mid-way: 13 scores stored, the judge holding the calls in flight.
        wait_for(lambda: cli.json("curations", "get", "cur-kill")["progress"]["judged"] == 13, 120, "13 scores stored")
        wait_for(lambda: len(judge.asked) > 13, 60, "calls in flight at the judge")
        before_kill = {a for a, n in judge.verdicts.items() if n}
        assert len(before_kill) == 13
        svc.proc.send_signal(signal.SIGKILL)
        svc.proc.wait(timeout=30)
        judge.restart()
        svc = start_trainerd(bin_dir, tmp_path / "svc", config(judge))
        cli = Cli(bin_dir / "trainer", svc.url)
        done = cli.json("curations", "wait", "cur-kill", "--exit-status", timeout=300)
        assert done["phase"] == "COMPLETED" and done["attempt"] == 2, done
        assert done["progress"] == {"judged": 40, "total": 40}
        # Every candidate got exactly one verdict; none judged before the kill was asked again.
        assert judge.verdicts == {a: 1 for a in answers}
        asked_after = {a for g, a in judge.asked if g == 1}
        assert not asked_after & before_kill
        kept = [a for a in answers if score_of(a) >= THRESHOLD]
        assert [r["messages"][-1]["content"] for r in dataset_rows(svc, cli, "support")] == kept
    finally:
        stop(svc.proc, svc.data_dir)


def test_bad_curation_requests_are_refused_naming_the_field_and_start_nothing(bin_dir, judge, tmp_path):
    svc = start_trainerd(bin_dir, tmp_path / "svc", config(judge))
    try:
        cli = Cli(bin_dir / "trainer", svc.url)
        path, _ = canonical(tmp_path, "calls.jsonl", range(3))
        digest = cli("sessions", "create", "-f", path, "--source", "canonical", check=True).stdout.strip()
        cases = [
            (request("bad", ["0" * 64]), "sessionHashes[0]", 404),
            (request("bad", [digest], threshold=1.5), "threshold", 400),
            (request("bad", [digest], threshold="high"), "threshold", 400),
            ({k: v for k, v in request("bad", [digest]).items() if k != "dataset"}, "dataset", 400),
            (request("bad", [digest], dataset="Not A Name"), "dataset", 400),
            (request("bad", [digest], source="oasst1"), "source", 400),
            (request("bad", []), "sessionHashes", 400),
            (request("bad", [digest], judge="nobody"), "judge", 400),
            (request("bad id", [digest]), "curationId", 400),
            ({**request("bad", [digest]), "cancel": True}, "cancel", 400),
        ]
        for body, field, code in cases:
            status, answer = call(f"{svc.url}/v1/curations", "POST", body)
            assert (status, answer["error"].get("field")) == (code, field), (body, answer)
            out = cli("curations", "apply", "-f", "-", input=json.dumps(body))
            assert out.returncode == 1 and field.split("[")[0] in out.stderr, (field, out.stderr)
        assert cli.json("curations", "list")["curations"] == []
        assert judge.asked == []
        out = cli("curations", "cancel", "bad")
        assert out.returncode == 2, out.stderr  # not cancellable: there is no such command
        out = cli("curations", "get", "nope")
        assert out.returncode == 1 and "nope" in out.stderr

        # A curation that keeps nothing fails, registers nothing, and --exit-status says so.
        out = cli("curations", "apply", "-f", "-", "--wait", "--exit-status",
                  input=json.dumps(request("too-strict", [digest], threshold=1.0)))
        assert out.returncode == 3, out.stdout + out.stderr
        failed = cli.json("curations", "get", "too-strict")
        assert failed["phase"] == "FAILED" and "no candidate scored at least the threshold" in failed["failureReason"]
        assert (failed["accepted"], failed["rejected"]) == (0, 3)
        assert cli("datasets", "get", "support").returncode == 1
        # A judge that refuses a call fails the curation at once, naming it, never its reply's bytes.
        out = cli("curations", "apply", "-f", "-", "--wait", "--exit-status",
                  input=json.dumps(request("refused", [digest], judge="refusing-judge")))
        assert out.returncode == 3, out.stdout + out.stderr
        failed = cli.json("curations", "get", "refused")
        assert "judge 'refusing-judge' answered HTTP 401" in failed["failureReason"], failed
        assert "bad key" not in failed["failureReason"] and failed["progress"]["judged"] == 0
    finally:
        stop(svc.proc, svc.data_dir)
