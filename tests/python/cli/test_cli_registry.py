"""The model registry end to end, through the real `trainer` CLI against a real trainerd: a
completed run registers its final snapshot's weights; `snapshots register` registers an earlier
one in durable steps (and survives a SIGKILL of trainerd); `trained-models register` imports a
PEFT LoRA adapter that PEFT itself wrote, refusing broken copies; refs point at registered models
and `workloads history` shows who moved them."""
from __future__ import annotations

import hashlib
import json
import os
import pathlib
import shutil
import signal
import time
import urllib.request

import pytest
import torch
from safetensors.torch import load_file, save_file

from cli_support import (DATASET_NAME, EXAMPLES, MODEL_NAME, WORKLOAD, Cli, call, job_credentials, start_trainerd,
                         stop)
from registry_support import edit_config, files_of, make_peft_adapter, wait_model

pytestmark = pytest.mark.timeout(1200)  # its runs are waited for up to 1000 s each (run_to_end)

MAX_RANK = 8
TERMINAL = {"COMPLETED", "FAILED", "CANCELLED"}


@pytest.fixture(scope="module")
def trainerd(bin_dir, tiny_model, tmp_path_factory):
    """This module's service: the tests' base model, and a small adapter rank limit."""
    service = start_trainerd(bin_dir, tmp_path_factory.mktemp("trainerd"),
                             {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}],
                              "limits": {"maxAdapterRank": MAX_RANK}})
    yield service
    stop(service.proc, service.data_dir)


def plan(max_steps: int, save_every: int | None = None, workload: str = WORKLOAD) -> str:
    execution = "{gpus: 0" + (f", saveEvery: {save_every}" if save_every else "") + "}"
    return "\n".join([
        "kind: run", f"workload: {workload}", f"baseModel: {MODEL_NAME}", "config:",
        f"  dataset: {DATASET_NAME}", "  hyperparams:", "    optimizer: {learningRate: 0.003}",
        f"    training: {{maxSteps: {max_steps}, batchSize: 4}}", "  maxSeqLength: 128",
        "  model: {precision: FP32}", f"execution: {execution}", "configName: small-lr"]) + "\n"


def run_to_end(cli, text: str) -> dict:
    out = cli("runs", "start", "-f", "-", "--force", "-o", "json", input=text)
    assert out.returncode == 0, out.stderr
    run_id = json.loads(out.stdout)["runId"]
    cli("runs", "wait", run_id, "--timeout", "15m", timeout=1000)
    run = cli.json("runs", "get", run_id)
    assert run["phase"] == "COMPLETED", run
    return run


def model_ids(cli) -> list[str]:
    return [m["modelId"] for m in cli.json("trained-models", "list")["models"]]


def local(uri: str) -> pathlib.Path:
    assert uri.startswith("file://"), uri
    return pathlib.Path(uri[len("file://"):])


def commit_by_hand(trainerd, run_id: str, step: int, kind: str, payload: bytes) -> str:
    """Reserves, uploads and commits one artifact kind of a running run as its job would (with
    its attempt's credentials)."""
    manifest = {"format": 1, "kind": kind, "runId": run_id, "engineStep": step, "epoch": 0, "baseModelSha": "",
                "files": [{"path": "a.bin", "bytes": len(payload), "sha256": hashlib.sha256(payload).hexdigest()}]}
    text = json.dumps(manifest, separators=(",", ":"), sort_keys=True).encode()
    digest = hashlib.sha256(text).hexdigest()
    sid = hashlib.sha256(f"trainer-snapshot-v1\n{run_id}\n{step}\n{kind}={digest}\n".encode()).hexdigest()
    body = {"snapshotId": sid, "attempt": 1, "step": step, "epoch": 0,
            "kinds": {kind: {"manifestDigest": digest, "bytes": len(payload)}}}
    job = job_credentials(trainerd, run_id)
    status, reserved = call(f"{trainerd.url}/v1/runs/{run_id}/snapshots", "POST", body, job)
    assert status == 201, reserved
    folder = trainerd.data_dir / "snapshots" / sid / kind
    folder.mkdir(parents=True)
    (folder / "a.bin").write_bytes(payload)
    (folder / "manifest.json").write_bytes(text)
    status, committed = call(f"{trainerd.url}/v1/snapshots/{sid}/commit", "POST", {"kind": kind}, job)
    assert status == 200, committed
    return sid


# ---- a completed run, and `snapshots register`


def test_a_completed_run_registers_its_final_snapshot_once(ready, trainerd):
    run = run_to_end(ready, plan(3))
    run_id = run["runId"]
    model = wait_model(ready, run["modelId"])
    assert model["status"] == "REGISTERED", model
    assert [s["status"] for s in model["statusHistory"]] == ["PENDING", "COPYING", "REGISTERED"]
    final = ready.json("runs", "snapshots", run_id)["snapshots"][0]
    assert final["savedStep"] == 3
    assert (model["variant"], model["method"], model["baseModel"]["name"]) == ("ADAPTER", "SFT", MODEL_NAME)
    assert model["workload"]["name"] == WORKLOAD
    assert model["source"] == {"kind": "snapshot", "runId": run_id, "snapshotId": final["snapshotId"],
                               "savedStep": 3, "attempt": 1}
    assert model["config"]["configName"] == "small-lr"
    assert model["config"]["settingsSha"] == ready.json("runs", "hparams", run_id)["sha"]
    assert model["lineage"]["runId"] == run_id and model["lineage"]["snapshotId"] == final["snapshotId"]
    assert model["cost"]["gpuSeconds"] == ready.json("runs", "get", run_id)["cost"]["gpuSeconds"]
    assert model["adapterRank"] == 8 and model["evaluations"] == []
    assert model["name"] == MODEL_NAME  # no modelName in the plan: the base model's name
    # The registry's copy holds exactly the snapshot's adapter files.
    snapshot_files = files_of(trainerd.data_dir / final["kinds"]["weights"]["location"])
    del snapshot_files["manifest.json"]
    copy = files_of(local(model["artifact"]["uri"]))
    assert copy == snapshot_files and set(copy) >= {"adapter_config.json", "adapter_model.safetensors"}
    assert model["servingModel"]["ref"] == model["artifact"]["uri"]
    # The copy is durable: the registration released its hold.
    assert ready.json("snapshots", "get", final["snapshotId"])["heldBy"] == []
    # Registering the same snapshot again is the same model, registered once.
    again = ready.json("snapshots", "register", final["snapshotId"][:16])
    assert again["modelId"] == run["modelId"] and again["status"] == "REGISTERED"
    assert model_ids(ready).count(run["modelId"]) == 1
    candidate = ready.json("snapshots", "candidate", final["snapshotId"][:12])
    assert candidate["status"] == "REGISTERED" and candidate["modelId"] == run["modelId"]
    assert f"Model: {run['modelId']}" in " ".join(ready("runs", "get", run_id, check=True).stdout.split())
    text = ready("trained-models", "get", run["modelId"][:8], check=True).stdout
    for expected in ("REGISTERED", "small-lr", model["artifact"]["uri"], run_id[:8]):
        assert expected in text, text
    # A CPU run's model costs CPU time, never "GPU" (issue 30).
    assert model["cost"]["deviceKind"] == "CPU" and model["cost"]["deviceSeconds"] == model["cost"]["gpuSeconds"]
    cost_line = next(line for line in text.splitlines() if line.startswith("Cost"))
    assert "CPU-" in cost_line and "GPU" not in text, text
    listed = ready("trained-models", "list", "--workload", WORKLOAD, check=True).stdout
    assert run["modelId"] in listed and "ADAPTER" in listed
    by_base = ready.json("trained-models", "list", "--base-model-id", model["baseModel"]["id"][:8])["models"]
    assert run["modelId"] in [m["modelId"] for m in by_base]
    unknown = ready("trained-models", "list", "--base-model", "no-such-model")
    assert unknown.returncode == 1 and "baseModel" in unknown.stderr, unknown.stderr
    # Each durable step of the register_candidate operation is counted, and its end.
    with urllib.request.urlopen(trainerd.url + "/metrics", timeout=30) as r:
        metrics = [line for line in r.read().decode().splitlines()
                   if 'akka_optimize_training_service_operation="register_candidate"' in line]
    for stage in ("accept", "retain", "export", "register", "release"):
        assert any(f'akka_optimize_training_service_stage="{stage}"' in line for line in metrics), (stage, metrics)
    assert any('akka_optimize_training_service_outcome="success"' in line and "_bucket" not in line and
               "stage" not in line for line in metrics), metrics


def test_a_plans_model_name_names_the_model_it_registers(ready):
    run = run_to_end(ready, plan(2) + "modelName: support triage v2\n")
    model = wait_model(ready, run["modelId"])
    assert model["name"] == "support triage v2" and run["plan"]["modelName"] == "support triage v2"
    shown = ready("trained-models", "get", run["modelId"][:12], check=True).stdout
    assert "Name:" in shown and "support triage v2" in shown, shown
    listed = ready("trained-models", "list", check=True).stdout
    header, *rows = listed.splitlines()
    assert header.split()[:2] == ["MODEL", "NAME"], header
    assert any(r.startswith(run["modelId"][:8]) and "support triage v2" in r for r in rows), listed
    out = ready("runs", "start", "-f", "-", "--force", input=plan(2) + "modelName: ''\n")
    assert out.returncode != 0 and "modelName: must be 1 to 200 characters, got 0" in out.stderr, out.stderr


def test_snapshots_register_registers_an_earlier_snapshot_as_a_candidate(ready, trainerd):
    run = run_to_end(ready, plan(4, save_every=2))
    snapshots = ready.json("runs", "snapshots", run["runId"])["snapshots"]
    earlier = [s for s in snapshots if s["savedStep"] == 2][0]
    out = ready("snapshots", "register", earlier["snapshotId"][:12], check=True).stdout
    assert "Registering snapshot" in out and "trainer snapshots candidate" in out
    registered = ready.json("snapshots", "register", earlier["snapshotId"][:12])
    assert registered["modelId"] != run["modelId"]
    model = wait_model(ready, registered["modelId"])
    assert model["status"] == "REGISTERED" and model["source"]["savedStep"] == 2
    weights = files_of(trainerd.data_dir / earlier["kinds"]["weights"]["location"])
    del weights["manifest.json"]
    assert files_of(local(model["artifact"]["uri"])) == weights
    # Step 2's adapter is not the final one.
    final = wait_model(ready, run["modelId"])
    assert files_of(local(final["artifact"]["uri"]))["adapter_model.safetensors"] != weights["adapter_model.safetensors"]
    text = ready("snapshots", "candidate", earlier["snapshotId"][:12], check=True).stdout
    assert "REGISTERED" in text and registered["modelId"] in text


def test_training_state_only_snapshots_are_refused_and_a_failed_copy_keeps_its_hold(ready, trainerd):
    out = ready("runs", "start", "-f", "-", "--force", "-o", "json", input=plan(100000))
    run_id = json.loads(out.stdout)["runId"]
    try:
        before = model_ids(ready)
        state_only = commit_by_hand(trainerd, run_id, 7, "trainingState", b"optimizer state")
        refused = ready("snapshots", "register", state_only)
        assert refused.returncode == 1 and "holds only training state" in refused.stderr, refused.stderr
        assert model_ids(ready) == before
        missing = ready("snapshots", "candidate", state_only)
        assert missing.returncode == 1 and "has no registration" in missing.stderr

        # A weights snapshot whose bytes vanish before the copy: the registration fails by name and
        # keeps holding its source (a step that timed out may have succeeded).
        sid = commit_by_hand(trainerd, run_id, 9, "weights", b"adapter bytes")
        (trainerd.data_dir / "snapshots" / sid / "weights" / "a.bin").unlink()
        registered = ready.json("snapshots", "register", sid)
        model = wait_model(ready, registered["modelId"])
        assert model["status"] == "FAILED" and "a.bin" in model["failureReason"], model
        candidate = ready("snapshots", "candidate", sid, check=True).stdout
        assert "FAILED" in candidate and "snapshots release" in candidate
        held = ready.json("snapshots", "get", sid)["heldBy"]
        assert [(h["holder"], h["modelId"], h["artifacts"]) for h in held] == \
            [("registration", registered["modelId"], ["weights"])]
        assert "registration" in ready("runs", "snapshots", run_id, check=True).stdout
        # A FAILED model is no ref target.
        refused = ready("workloads", "refs", "set", WORKLOAD, "candidate", registered["modelId"])
        assert refused.returncode == 1 and "only a REGISTERED model" in refused.stderr
        # Registering it again, once its bytes are back, tries again and releases the hold.
        (trainerd.data_dir / "snapshots" / sid / "weights" / "a.bin").write_bytes(b"adapter bytes")
        assert ready.json("snapshots", "register", sid)["modelId"] == registered["modelId"]
        model = wait_model(ready, registered["modelId"])
        assert model["status"] == "REGISTERED" and model["failureReason"] is None, model
        assert [s["status"] for s in model["statusHistory"]] == \
            ["PENDING", "COPYING", "FAILED", "PENDING", "COPYING", "REGISTERED"]
        assert ready.json("snapshots", "get", sid)["heldBy"] == []
        assert files_of(local(model["artifact"]["uri"])) == {"a.bin": b"adapter bytes"}
    finally:
        ready("runs", "cancel", run_id, "--force")
        deadline = time.time() + 120
        while ready.json("runs", "get", run_id)["phase"] not in TERMINAL and time.time() < deadline:
            time.sleep(0.5)


# ---- imports of PEFT adapters


@pytest.fixture(scope="module")
def peft_adapter(tiny_model, tmp_path_factory) -> pathlib.Path:
    return make_peft_adapter(tiny_model, tmp_path_factory.mktemp("adapters") / "peft", rank=4)


def descriptor(folder: pathlib.Path, workload: str | None = WORKLOAD, base: str = MODEL_NAME, **extra) -> str:
    doc = {"servingModel": {"variant": "ADAPTER", "baseModel": base, "ref": str(folder), **extra}}
    if workload:
        doc["workload"] = workload
    return json.dumps(doc)


def test_an_adapter_peft_wrote_is_imported_once(ready, peft_adapter, tmp_path):
    yaml = tmp_path / "adapter.yaml"
    yaml.write_text(f"servingModel:\n  variant: ADAPTER\n  baseModel: {MODEL_NAME}\n  ref: {peft_adapter}\n"
                    f"  adapterRank: 4\nworkload: {WORKLOAD}\n")
    out = ready("trained-models", "register", "-f", yaml, check=True).stdout
    assert out.startswith("Registered ADAPTER model ") and "REGISTERED" in out
    model = ready.json("trained-models", "register", "-f", yaml)
    assert model["status"] == "REGISTERED" and model["adapterRank"] == 4
    assert model["targetModules"] == ["q_proj", "v_proj"] and model["source"]["kind"] == "import"
    assert model["workload"]["name"] == WORKLOAD and model["evaluations"] == []
    # The registry keeps the adapter's two files (PEFT's README.md stays behind).
    adapter_files = {k: v for k, v in files_of(peft_adapter).items() if k.startswith("adapter_")}
    assert files_of(local(model["artifact"]["uri"])) == adapter_files and len(adapter_files) == 2
    assert model_ids(ready).count(model["modelId"]) == 1
    # The same bytes again (JSON from stdin this time) are the same model.
    again = ready.json("trained-models", "register", "-f", "-", input=descriptor(peft_adapter))
    assert again["modelId"] == model["modelId"]
    got = ready.json("trained-models", "get", model["modelId"][:10])
    assert got == model


def _missing_weights(folder):
    (folder / "adapter_model.safetensors").unlink()


def _not_lora(folder):
    edit_config(folder, peft_type="IA3")


def _modules_to_save(folder):
    edit_config(folder, modules_to_save=["lm_head"])


def _trained_elsewhere(folder):
    edit_config(folder, base_model_name_or_path="Qwen/Qwen3-8B")


def _missing_target(folder):
    edit_config(folder, target_modules=["q_proj", "v_proj", "w_gate"])


def _truncated(folder):
    data = (folder / "adapter_model.safetensors").read_bytes()
    (folder / "adapter_model.safetensors").write_bytes(data[: len(data) // 2])


def _wrong_shape(folder):
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    name = sorted(k for k in tensors if "lora_A" in k)[0]
    tensors[name] = torch.zeros(4, 32)  # the tiny model's hidden size is 64
    save_file(tensors, str(folder / "adapter_model.safetensors"))


def _integer_tensor(folder):
    tensors = load_file(str(folder / "adapter_model.safetensors"))
    name = sorted(k for k in tensors if "lora_B" in k)[0]
    tensors[name] = torch.zeros(tensors[name].shape, dtype=torch.int32)
    save_file(tensors, str(folder / "adapter_model.safetensors"))


@pytest.mark.parametrize("damage,field,message", [
    (_missing_weights, "servingModel.ref", "missing file adapter_model.safetensors"),
    (_not_lora, "servingModel.ref", "peft_type is \"IA3\"; only LoRA adapters"),
    (_modules_to_save, "servingModel.ref", "modules_to_save is [\"lm_head\"]"),
    (_trained_elsewhere, "servingModel.baseModel", "the adapter was trained on 'Qwen/Qwen3-8B'"),
    (_missing_target, "servingModel.ref", "target module 'w_gate' is not a module of the base model"),
    (_truncated, "servingModel.ref", "adapter_model.safetensors"),
    (_wrong_shape, "servingModel.ref", "has shape [4, 32], but r=4"),
    (_integer_tensor, "servingModel.ref", "the adapter does not load on 'tiny-qwen3'"),
], ids=["missing-file", "not-lora", "modules-to-save", "wrong-base", "missing-target", "bad-safetensors",
        "wrong-shape", "does-not-load"])
def test_a_broken_adapter_is_refused_by_name_and_nothing_is_registered(ready, peft_adapter, tmp_path, damage,
                                                                       field, message):
    folder = tmp_path / "broken"
    shutil.copytree(peft_adapter, folder)
    damage(folder)
    before = model_ids(ready)
    out = ready("trained-models", "register", "-f", "-", input=descriptor(folder))
    assert out.returncode == 1, out.stdout
    assert field in out.stderr and message in out.stderr, out.stderr
    assert model_ids(ready) == before


def test_a_rank_above_the_limit_and_a_base_model_not_allowed_are_refused(ready, tiny_model, tmp_path):
    big = make_peft_adapter(tiny_model, tmp_path / "r16", rank=2 * MAX_RANK)
    before = model_ids(ready)
    out = ready("trained-models", "register", "-f", "-", input=descriptor(big))
    assert out.returncode == 1
    assert f"rank r=16 is above the deployment's maximum {MAX_RANK} (limits.maxAdapterRank)" in out.stderr, out.stderr
    small = make_peft_adapter(tiny_model, tmp_path / "r2", rank=2)
    out = ready("trained-models", "register", "-f", "-", input=descriptor(small, base="Qwen/Qwen3-8B"))
    assert out.returncode == 1 and "'Qwen/Qwen3-8B' is not one of the deployment's base models" in out.stderr
    out = ready("trained-models", "register", "-f", "-", input=descriptor(small, adapterRank=3))
    assert out.returncode == 1 and "servingModel.adapterRank" in out.stderr and "rank r is 2" in out.stderr
    out = ready("trained-models", "register", "-f", "-",
                input=json.dumps({"servingModel": {"variant": "WEIGHTS", "baseModel": MODEL_NAME}}))
    assert out.returncode == 1 and "'WEIGHTS' is not a variant; use BASE or ADAPTER" in out.stderr
    assert model_ids(ready) == before


# ---- refs and history


def test_refs_point_at_registered_models_of_the_workload_and_history_shows_each_move(ready, peft_adapter, tmp_path):
    base = ready.json("trained-models", "register", "-f", "-",
                      input=json.dumps({"servingModel": {"variant": "BASE", "baseModel": MODEL_NAME}}))
    assert base["variant"] == "BASE" and base["status"] == "REGISTERED" and base["workload"] is None
    assert ready.json("trained-models", "register", "-f", "-",
                      input=json.dumps({"servingModel": {"variant": "BASE", "baseModel": MODEL_NAME}}))["modelId"] \
        == base["modelId"]
    no_workload = ready.json("trained-models", "register", "-f", "-", input=descriptor(peft_adapter, workload=None))
    first = run_to_end(ready, plan(2))
    second = run_to_end(ready, plan(3))
    a, b = wait_model(ready, first["modelId"]), wait_model(ready, second["modelId"])
    env = {"USER": "alice"}

    def move(ref: str, target: str):
        return ready("workloads", "refs", "set", WORKLOAD, ref, target, env=env)

    assert move("base", base["modelId"]).returncode == 0
    refused = move("base", a["modelId"])
    assert refused.returncode == 1 and "base must point at a BASE model" in refused.stderr
    refused = move("candidate", base["modelId"])
    assert refused.returncode == 1 and "must point at an adapter model of this workload" in refused.stderr
    refused = move("candidate", no_workload["modelId"])
    assert refused.returncode == 1 and "belongs to no workload" in refused.stderr
    ready("workloads", "create", "other-workload", check=True)
    other = run_to_end(ready, plan(2, workload="other-workload"))
    wait_model(ready, other["modelId"])
    refused = move("champion", other["modelId"])
    assert refused.returncode == 1 and "belongs to workload other-workload" in refused.stderr
    # A completed run names its model.
    assert move("candidate", first["runId"]).returncode == 0
    target = ready.json("workloads", "refs", "get", WORKLOAD, "candidate")["target"]
    assert target["modelId"] == a["modelId"] and target["artifact"] == a["artifact"]
    for model in (a, b, a):  # promote, promote the next, roll back
        assert move("champion", model["modelId"]).returncode == 0
    text = ready("workloads", "refs", "get", WORKLOAD, "champion", check=True).stdout
    assert a["modelId"] in text
    history = [h for h in ready.json("workloads", "history", WORKLOAD)["history"] if "ref" in h]
    assert [(h["ref"], h["from"], h["to"], h["by"]) for h in history][-5:] == [
        ("base", None, base["modelId"], "alice"),
        ("candidate", None, a["modelId"], "alice"),
        ("champion", None, a["modelId"], "alice"),
        ("champion", a["modelId"], b["modelId"], "alice"),
        ("champion", b["modelId"], a["modelId"], "alice")]
    assert all(h["time"] for h in history)
    table = ready("workloads", "history", WORKLOAD, check=True).stdout
    assert "ref champion" in table and "alice" in table and b["modelId"] in table
    # A plan without baseModel trains the base ref's model.
    assert ready.json("workloads", "refs", "get", WORKLOAD, "base")["target"]["name"] == MODEL_NAME


# ---- a registration survives a SIGKILL of trainerd


def test_a_registration_interrupted_by_sigkill_finishes_after_restart_and_registers_once(bin_dir, tiny_model,
                                                                                          tmp_path):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model)}]}
    os.environ["TRAINER_TEST_REGISTRATION_PAUSE_MS"] = "600000"  # hold every copy before REGISTERED
    try:
        service = start_trainerd(bin_dir, tmp_path, config)
    finally:
        del os.environ["TRAINER_TEST_REGISTRATION_PAUSE_MS"]
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        cli("base-models", "select", MODEL_NAME, "--wait", "--timeout", "2m", check=True)
        cli("datasets", "create", "-f", EXAMPLES / "sentiment" / "train.jsonl", "--name", DATASET_NAME, check=True)
        cli("workloads", "create", WORKLOAD, check=True)
        run = run_to_end(cli, plan(2))
        model_id = run["modelId"]
        final = cli.json("runs", "snapshots", run["runId"])["snapshots"][0]
        copy = service.data_dir / "registry" / "models" / model_id
        deadline = time.time() + 120
        while not copy.exists():  # copied, not yet recorded REGISTERED
            assert time.time() < deadline, "the registration never copied"
            time.sleep(0.1)
        assert cli.json("snapshots", "candidate", final["snapshotId"])["status"] == "COPYING"
        os.killpg(service.proc.pid, signal.SIGKILL)
        service.proc.wait(timeout=30)
    finally:
        stop(service.proc, service.data_dir)

    service = start_trainerd(bin_dir, tmp_path, config)
    try:
        cli = Cli(bin_dir / "trainer", service.url)
        model = wait_model(cli, model_id)
        assert model["status"] == "REGISTERED", model
        assert [s["status"] for s in model["statusHistory"]] == ["PENDING", "COPYING", "REGISTERED"]
        assert [m["modelId"] for m in cli.json("trained-models", "list")["models"]] == [model_id]
        weights = files_of(service.data_dir / final["kinds"]["weights"]["location"])
        del weights["manifest.json"]
        assert files_of(local(model["artifact"]["uri"])) == weights
        assert cli.json("snapshots", "get", final["snapshotId"])["heldBy"] == []
        assert cli.json("snapshots", "register", final["snapshotId"])["modelId"] == model_id
        assert not list((service.data_dir / "registry-staging").glob("*"))
    finally:
        stop(service.proc, service.data_dir)
