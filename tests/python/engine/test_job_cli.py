"""trainer-job's dispatcher and the failure path of `run`."""
import json


def test_help_lists_the_commands(job):
    out = job("--help")
    for name in ("run", "score", "tokenize", "analyze"):
        assert f"  {name} " in out.stdout


def test_unknown_command_is_a_usage_error(job):
    out = job("train", check=False)
    assert out.returncode == 2
    assert "unknown command 'train'" in out.stderr


def test_run_without_plan_is_a_usage_error(job, tmp_path):
    out = job("run", "--output", tmp_path, check=False)
    assert out.returncode == 2
    assert "--plan and --output are required" in out.stderr


def test_run_with_an_invalid_plan_reports_failed_naming_the_field(job, tmp_path):
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kind": "run", "workload": "w", "baseModel": str(tmp_path),
                                "config": {"dataset": "d.jsonl", "hyperparams": {"lora": {"rank": -1}}}}))
    out = job("run", "--plan", plan, "--output", tmp_path / "out", check=False)
    assert out.returncode == 1
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[-1]["type"] == "failed"
    assert "config.hyperparams.lora.rank" in events[-1]["reason"]


def test_run_with_a_missing_model_folder_fails_with_its_path(job, tmp_path):
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}) + "\n")
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"kind": "run", "workload": "w", "baseModel": str(tmp_path / "missing"),
                                "config": {"dataset": str(data)}, "execution": {"gpus": 0}}))
    out = job("run", "--plan", plan, "--output", tmp_path / "out", check=False)
    assert out.returncode == 1
    events = [json.loads(line) for line in out.stdout.splitlines()]
    assert events[0]["type"] == "hello" and events[0]["protocolVersion"] == 1
    assert events[1] == {"type": "phase", "phase": "PREPARING"}
    assert events[-1] == {"type": "failed", "reason": f"{tmp_path / 'missing'}: no such model folder"}
    assert not (tmp_path / "out" / "adapter").exists()
