"""Device health and worker series of trainer-job (docs/data-parallel.md): a job without NVML
records no gpu.* series and says so once, and a data-parallel job publishes one worker-info
series per rank while it trains."""
import json
import os
import signal
import subprocess
import time

from engine_helpers import write_jsonl
from test_job_telemetry import metric_names, receiver  # noqa: F401  (the fixture)
from test_sft import plan_for, task_rows
from waiting import wait_for

WORKER_INFO = "akka.optimize.training.job.worker.info"


def worker_ranks(body):
    """The job.rank of every worker-info series in one pushed body."""
    ranks = set()
    for sm in body["resourceMetrics"][0]["scopeMetrics"]:
        for m in sm["metrics"]:
            if m["name"] != WORKER_INFO:
                continue
            for point in m["gauge"]["dataPoints"]:
                attrs = {a["key"]: next(iter(a["value"].values())) for a in point["attributes"]}
                ranks.add(int(attrs["akka.optimize.training.job.rank"]))
    return ranks


def test_a_cpu_job_without_nvml_records_no_gpu_series_and_says_so_once(tiny_models, bin_dir, tmp_path, receiver):  # noqa: F811
    model = tiny_models("qwen3")
    data = write_jsonl(tmp_path / "train.jsonl", task_rows(32))
    plan = plan_for(model, data, maxSteps=100000, validationSplit=0.0, validationFrequencySteps=0)
    plan["execution"] = {"gpus": 2}  # two CPU ranks
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    events_path = tmp_path / "events"
    absent = tmp_path / "no-driver" / "libnvidia-ml.so.1"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRAINER_"))}
    env |= {"TRAINER_OTLP_ENDPOINT": receiver.endpoint, "TRAINER_OTLP_INTERVAL_MS": "200",
            "TRAINER_NVML_LIBRARY": str(absent)}
    proc = subprocess.Popen([str(bin_dir / "trainer-job"), "run", "--plan", str(tmp_path / "plan.json"), "--output",
                             str(tmp_path / "out"), "--events", str(events_path)], stderr=subprocess.PIPE, text=True,
                            env=env)
    try:
        deadline = time.time() + 180
        while time.time() < deadline and proc.poll() is None:
            if events_path.exists() and events_path.read_text().count('"type":"step"') >= 3:
                break
            time.sleep(0.1)
        assert proc.poll() is None
        wait_for(lambda: any(worker_ranks(b) == {0, 1} for b in receiver.bodies), timeout=60,
                 what="a push while training")
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 143, stderr
    notices = [line for line in stderr.splitlines() if "NVML not available" in line]
    assert len(notices) == 1, stderr
    assert str(absent) in notices[0] and "no gpu.* metrics are recorded" in notices[0]
    assert receiver.bodies
    assert not any(name.startswith("akka.optimize.training.gpu.") for b in receiver.bodies for name in metric_names(b))
    # While training, one worker series per rank; none once the job has ended.
    assert any(worker_ranks(b) == {0, 1} for b in receiver.bodies[:-1]), [worker_ranks(b) for b in receiver.bodies]
    assert worker_ranks(receiver.bodies[-1]) == set()
