"""The job a run starts is told who it trains for (the service/job contract's environment)."""
import json

from service_helpers import plan


def test_a_started_job_sees_its_run_identity(start_trainerd, setup_basics, standin_behaviour, tmp_path):
    env_file = tmp_path / "job-env.json"
    standin_behaviour(envFile=str(env_file))
    d = start_trainerd(telemetry={"otlpEndpoint": "http://127.0.0.1:4318", "otlpIntervalMs": 1000})
    setup_basics(d)
    model = next(m for m in d.ok(d.get("/v1/base-models"), 200)["baseModels"] if m["name"] == "tiny/qwen3")
    run = d.ok(d.post("/v1/runs", plan()), 201)
    assert d.wait_phase(run["runId"], "COMPLETED")["outcome"] == "COMPLETED"
    env = json.loads(env_file.read_text())
    expected = {
        "TRAINER_RUN_ID": run["runId"],
        "TRAINER_ATTEMPT": "1",
        "TRAINER_WORKLOAD": "triage",
        "TRAINER_METHOD": "sft",
        "TRAINER_BASE_MODEL": "tiny/qwen3",
        "TRAINER_BASE_MODEL_SHA": model["contentHash"],
        "TRAINER_PROFILE": "cpu",
        "TRAINER_OTLP_ENDPOINT": "http://127.0.0.1:4318",
        "TRAINER_OTLP_INTERVAL_MS": "1000",
    }
    assert {k: env.get(k) for k in expected} == expected, env


def test_an_unknown_compute_backend_is_refused_by_name(tmp_path):
    import subprocess
    from service_helpers import BUILD
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"compute": {"backend": "pbs"}}))
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out
    assert "compute.backend: 'pbs' is not a compute backend of this build; use local, slurm or ray" in out.stderr


def test_a_json_error_in_the_configuration_names_line_and_column(tmp_path):
    import subprocess
    from service_helpers import BUILD
    config = tmp_path / "config.json"
    config.write_text('{\n  "pools": [\n    {"name": "cpu",}\n  ]\n}\n')
    out = subprocess.run([str(BUILD / "apps" / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(config)], capture_output=True, text=True, timeout=30)
    assert out.returncode == 2, out
    assert "not valid JSON at line 3, column" in out.stderr, out.stderr
