"""trainer-job's verl bridge (src/job/verl_engine.h, the peer engines' bridge src/job/peer_worker.h)
driven through `trainer-job run` with a GRPO plan on engine verl, on a machine without a GPU. The
verl worker (engines/verl/verl_worker.py, in .venv-verl) runs for real: verl composes and validates
the plan's overrides, the prompts go to the parquet, the reward relay listens. In main_ppo's place,
the test-only replay hook (TRAINER_VERL_REPLAY, engines/verl/replay.py) plays back a recorded run:
its completions are scored through verl's custom reward function (engines/verl/reward.py), the
worker's relay and the job's own json-label-match grader; its metrics go through verl's file logger
into our `step` events; its saves' LoRA adapters become `checkpoint` and `completed` events. Then the
failures, each named with "engine verl:": verl's own error when main_ppo fails, a worker line that is
not an event, a silent (hung) worker, a pause (verl's snapshots hold no training state), and verl
started for real without a GPU (what verl prints is the run's reason)."""
from __future__ import annotations

import json
import os
import pathlib

import pytest

from engine_helpers import write_jsonl

LABELS = ["billing", "refund"]
STEPS = 4  # verl steps of one generation batch each (iterationsPerBatch 1); saves at 2 and 4


def rows(n: int = 4) -> list[dict]:
    return [{"messages": [{"role": "user", "content": f"Classify ticket {i}: my {LABELS[i % 2]} issue"},
                          {"role": "assistant", "content": json.dumps({"label": LABELS[i % 2]})}]} for i in range(n)]


def verl_plan(model: pathlib.Path, data: pathlib.Path) -> dict:
    return {"kind": "run", "workload": "engine-test", "baseModel": str(model),
            "config": {"dataset": str(data), "method": "grpo", "engine": "verl", "maxSeqLength": 96,
                       "model": {"precision": "FP32"},
                       "hyperparams": {"lora": {"rank": 4, "alpha": 8, "dropout": 0.0},
                                       "training": {"maxSteps": STEPS, "seed": 5}},
                       "reward": {"terms": [{"kind": "json-label-match", "weight": 1.0}]},
                       "rlHyperparams": {"groupSize": 2, "promptsPerStep": 2, "maxCompletionLength": 12,
                                         "optimizer": {"learningRate": 0.01, "schedule": "cosine"}}},
            "execution": {"gpus": 1, "saveEvery": 2}}


@pytest.fixture(scope="module")
def adapter(tiny_models, tmp_path_factory) -> pathlib.Path:
    """A PEFT LoRA adapter of the tiny model: what verl's merger yields from a save."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(tiny_models("qwen3")),
                           LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False))
    folder = tmp_path_factory.mktemp("adapter")
    model.save_pretrained(folder)
    return folder


def outputs() -> list[str]:
    """A step's completions, 2 prompts x 2: a billing label and a wrong one for the first prompt, a
    refund label and text that is no JSON for the second."""
    return [json.dumps({"label": "billing"}), json.dumps({"label": "nothing"}), json.dumps({"label": "refund"}),
            "not json"]


def record(adapter: pathlib.Path, **extra) -> dict:
    steps = [{"data": {"actor/pg_loss": -0.01 * s, "actor/lr": 0.01, "actor/grad_norm": 0.5 + s,
                       "critic/score/mean": 0.25, "timing_s/step": 2.0, "perf/total_num_tokens": 100 * s,
                       "response_length/mean": 6.0},
              "outputs": outputs()} for s in range(1, STEPS + 1)]
    return {"steps": steps, "saves": {"2": str(adapter), "4": str(adapter)}, **extra}


def run_verl(job, tmp_path, tiny_models, env: dict) -> tuple[object, list[dict], pathlib.Path]:
    data = write_jsonl(tmp_path / "rl.jsonl", rows())
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(verl_plan(tiny_models("qwen3"), data)))
    events_path = tmp_path / "events.jsonl"
    proc = job("run", "--plan", plan_path, "--output", tmp_path / "out", "--events", events_path, check=False,
               timeout=900, env={**os.environ, **env})
    events = [json.loads(line) for line in events_path.read_text().splitlines()] if events_path.exists() else []
    return proc, events, tmp_path / "out"


def test_a_replayed_verl_run_becomes_steps_rewards_and_adapter_snapshots(job, tiny_models, adapter, tmp_path):
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps(record(adapter)))
    proc, events, out = run_verl(job, tmp_path, tiny_models, {"TRAINER_VERL_REPLAY": str(replay)})
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "engine verl: worker" in proc.stderr and ".venv-verl" in proc.stderr, proc.stderr[-2000:]
    # verl resolved the translated keys (its own composition and checks ran).
    (config,) = [e["config"] for e in events if e["type"] == "engine_config"]
    assert config["actor_rollout_ref.rollout.n"] == 2 and config["trainer.save_freq"] == 2, config
    steps = [e for e in events if e["type"] == "step"]
    assert [s["step"] for s in steps] == [1, 2, 3, 4]
    assert [s["loss"] for s in steps] == pytest.approx([-0.01, -0.02, -0.03, -0.04])
    assert [s["batchTokens"] for s in steps] == [100, 200, 300, 400]
    # Each completion scored by the job's json-label-match, through verl's reward function and the relay:
    # the parquet's prompts are the native order's; the step's rewards follow its completions.
    parquet_labels = [json.loads(json.loads(line)["messages"][-1]["content"])["label"]
                      for line in (tmp_path / "rl.jsonl").read_text().splitlines()]
    order = json.loads((out / "verl" / "input.json").read_text())["order"]
    for n, s in enumerate(steps, 1):
        first, second = (parquet_labels[order[(2 * (n - 1) + k) % len(order)]] for k in (0, 1))
        wanted = [1.0 if first == "billing" else 0.0, 0.0, 1.0 if second == "refund" else 0.0, 0.0]
        assert s["rl"]["rewards"] == wanted, (n, s["rl"])
        assert s["rl"]["completionsScored"] == 4 and s["rl"]["rewardMean"] == 0.25
    # verl's save at step 2 is a checkpoint (its adapter, the weights kind: no training state); the
    # one at the last step is the completed adapter.
    (checkpoint,) = [e for e in events if e["type"] == "checkpoint"]
    assert checkpoint["step"] == 2 and "stateDir" not in checkpoint, checkpoint
    done = events[-1]
    assert done["type"] == "completed" and done["steps"] == STEPS and "stateDir" not in done, done
    for folder in (checkpoint["adapterDir"], done["adapterDir"]):
        assert (pathlib.Path(folder) / "adapter_model.safetensors").exists(), folder
        from peft import PeftConfig
        assert PeftConfig.from_pretrained(folder).r == 4


def test_verls_own_error_is_the_runs_reason(job, tiny_models, adapter, tmp_path):
    replay = tmp_path / "replay.json"
    replay.write_text(json.dumps({**record(adapter), "steps": record(adapter)["steps"][:1], "exitCode": 3,
                                  "say": ["(TaskRunner pid=1) Traceback (most recent call last):",
                                          "ValueError: Total available GPUs 0 is less than total desired GPUs 1."]}))
    proc, events, _ = run_verl(job, tmp_path, tiny_models, {"TRAINER_VERL_REPLAY": str(replay)})
    assert proc.returncode == 1
    assert [e["step"] for e in events if e["type"] == "step"] == [1]
    assert events[-1]["type"] == "failed", events[-1]
    assert events[-1]["reason"] == ("engine verl: verl's main_ppo exited with status 3: ValueError: Total available "
                                    "GPUs 0 is less than total desired GPUs 1."), events[-1]


def test_a_worker_line_that_is_not_an_event_fails_the_run_by_name(job, tiny_models, tmp_path):
    worker = tmp_path / "worker.py"
    worker.write_text('print(\'{"type":"phase","phase":"PREPARING"}\')\nprint("verl says hello", flush=True)\n'
                      'import time; time.sleep(60)\n')
    proc, events, _ = run_verl(job, tmp_path, tiny_models, {"TRAINER_VERL_WORKER": str(worker)})
    assert proc.returncode == 1 and events[-1]["type"] == "failed", events[-1:]
    assert events[-1]["reason"].startswith("engine verl: the worker wrote a line that is not a job-protocol event"), \
        events[-1]
    assert "verl says hello" in events[-1]["reason"]


def test_verl_started_without_a_gpu_fails_the_run_with_verls_own_words(job, tiny_models, tmp_path):
    """No replay: the worker starts verl's real main_ppo, which on this machine finds no rollout
    engine (no vLLM or SGLang: they need CUDA) and exits; what verl printed is the run's reason."""
    import torch
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: verl's rollout engine may start here")
    proc, events, _ = run_verl(job, tmp_path, tiny_models, {})
    assert proc.returncode == 1 and events[-1]["type"] == "failed", events[-1:]
    reason = events[-1]["reason"]
    assert reason.startswith("engine verl: verl's main_ppo exited with status 1: ValueError: vllm version None "
                             "not supported and SGLang also not Found"), reason
    assert not [e for e in events if e["type"] in ("step", "checkpoint")]


def test_a_silent_worker_is_hung_and_a_pause_is_refused_by_name(bin_dir, tiny_models, tmp_path):
    """The bridge's hang limit for verl (TRAINER_VERL_SILENCE_SECONDS), and a pause, which verl's
    adapter-only snapshots cannot serve: each ends the run failed, naming it."""
    import signal
    import subprocess
    import sys

    sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1]))
    from waiting import wait_for

    data = write_jsonl(tmp_path / "rl.jsonl", rows())
    plan_path = tmp_path / "plan.json"
    plan_path.write_text(json.dumps(verl_plan(tiny_models("qwen3"), data)))
    silent = tmp_path / "silent.py"
    silent.write_text('print(\'{"type":"phase","phase":"PREPARING"}\', flush=True)\nimport time; time.sleep(120)\n')
    beating = tmp_path / "beating.py"
    beating.write_text('import time\nprint(\'{"type":"phase","phase":"PREPARING"}\', flush=True)\n'
                       'for _ in range(600):\n    print(\'{"type":"heartbeat","uptimeSeconds":1}\', flush=True)\n'
                       '    time.sleep(0.2)\n')

    def start(name: str, env: dict) -> tuple[subprocess.Popen, pathlib.Path]:
        events = tmp_path / f"{name}.events"
        proc = subprocess.Popen([str(bin_dir / "trainer-job"), "run", "--plan", str(plan_path), "--output",
                                 str(tmp_path / name), "--events", str(events)], env={**os.environ, **env},
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        return proc, events

    def last_event(events: pathlib.Path) -> dict:
        return json.loads(events.read_text().splitlines()[-1])

    hung, hung_events = start("hung", {"TRAINER_VERL_WORKER": str(silent), "TRAINER_VERL_SILENCE_SECONDS": "2"})
    assert hung.wait(timeout=120) == 1, hung.stderr.read()
    assert last_event(hung_events)["reason"] == ("engine verl: the worker sent no event for 2 s "
                                                 "(TRAINER_VERL_SILENCE_SECONDS): hung; it was killed")

    paused, paused_events = start("paused", {"TRAINER_VERL_WORKER": str(beating)})
    wait_for(lambda: paused_events.exists() and '"PREPARING"' in paused_events.read_text(), timeout=120,
             what="the worker's first event")
    paused.send_signal(signal.SIGUSR1)  # trainer-job's pause signal (job/stop_signals.h)
    assert paused.wait(timeout=120) == 1, paused.stderr.read()
    reason = last_event(paused_events)["reason"]
    assert reason.startswith("engine verl: asked to pause, but engine verl cannot pause: its snapshots hold the "
                             "adapter alone"), reason
