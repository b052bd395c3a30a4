"""Admitted shapes and measured envelopes (issue 29): the run shapes a deployment admits for a base
model (baseModels[].shapes), shown by `base-models get`, enforced at submission (strict) or warned
about (advisory), and `base-models envelopes` measured from completed runs."""
from __future__ import annotations

import json
import subprocess

import pytest

from cli_support import MODEL_NAME, Cli, count_runs, plan_text, prepare, start_run, start_trainerd, stop

# The tiny model trains on the CPU in FP32; BF16 on the CPU is a shape the deployment leaves out.
SHAPES = [{"method": "sft", "precision": "FP32", "gpus": 0}, {"method": "sft", "precision": "FP32", "gpus": 1}]


def shaped_service(bin_dir, tiny_model, tmp, catalog: str | None):
    config = {"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model), "shapes": SHAPES}]}
    if catalog:
        config["shapeCatalog"] = catalog
    return start_trainerd(bin_dir, tmp, config)


@pytest.fixture(scope="module")
def strict(bin_dir, tiny_model, tmp_path_factory):
    service = shaped_service(bin_dir, tiny_model, tmp_path_factory.mktemp("strict"), None)
    try:
        yield prepare(Cli(bin_dir / "trainer", service.url))
    finally:
        stop(service.proc, service.data_dir)


def bf16(plan: str) -> str:
    assert "precision: FP32" in plan
    return plan.replace("precision: FP32", "precision: BF16")


def test_get_shows_the_admitted_rows(strict):
    doc = strict.json("base-models", "get", MODEL_NAME)
    assert doc["admittedShapes"] == SHAPES and doc["anyShape"] is False and doc["shapeCatalog"] == "strict"
    text = strict("base-models", "get", MODEL_NAME, check=True).stdout
    assert "Admitted shapes (strict):" in text, text
    rows = [line.split() for line in text.split("Admitted shapes (strict):", 1)[1].strip().splitlines()]
    assert rows == [["METHOD", "PRECISION", "GPUS"], ["sft", "FP32", "0"], ["sft", "FP32", "1"]], text


def test_a_plan_outside_every_row_is_refused_naming_the_nearest_row_and_nothing_starts(strict):
    before = count_runs(strict)
    out = strict("runs", "start", "-f", "-", "--force", input=bf16(plan_text(2)))
    assert out.returncode != 0, out.stdout
    assert "config.model.precision" in out.stderr, out.stderr
    assert "not admitted in the shape (sft, BF16, 0 gpus)" in out.stderr, out.stderr
    assert "nearest admitted shape is (sft, FP32, 0 gpus): use precision FP32" in out.stderr, out.stderr
    assert count_runs(strict) == before


def test_envelopes_measure_the_completed_runs_of_each_shape(strict):
    empty = strict.json("base-models", "envelopes")
    assert empty["catalog"] == "strict"
    cold = {(r["method"], r["precision"], r["gpus"]): r for r in empty["measurements"] if r["baseModel"] == MODEL_NAME}
    # Both admitted rows are listed before any run measured them (this module's runs are the only ones).
    assert set(cold) >= {("sft", "FP32", 0), ("sft", "FP32", 1)}
    assert cold[("sft", "FP32", 1)]["runs"] == 0 and cold[("sft", "FP32", 1)]["tokensPerSecond"] is None

    runs = [start_run(strict, plan_text(2), "--wait") for _ in range(2)]
    assert all(r["phase"] == "COMPLETED" for r in runs), [r.get("failureReason") for r in runs]
    speeds = sorted(r["latest"]["tokensPerSecond"] for r in runs)

    doc = strict.json("base-models", "envelopes")
    row = next(r for r in doc["measurements"]
               if (r["baseModel"], r["method"], r["precision"], r["gpus"]) == (MODEL_NAME, "sft", "FP32", 0))
    assert row["admitted"] is True and row["runs"] == cold[("sft", "FP32", 0)]["runs"] + 2
    assert row["tokensPerSecond"]["min"] <= speeds[0] and row["tokensPerSecond"]["max"] >= speeds[-1]
    assert row["tokensPerSecond"]["min"] <= row["tokensPerSecond"]["median"] <= row["tokensPerSecond"]["max"]
    assert row["maxSeqLength"] == 128
    untouched = next(r for r in doc["measurements"] if (r["baseModel"], r["gpus"]) == (MODEL_NAME, 1))
    assert untouched["runs"] == 0 and untouched["peakDeviceMemoryGb"] is None

    text = strict("base-models", "envelopes", check=True).stdout
    assert text.startswith("Catalog: strict"), text
    lines = text.splitlines()
    assert lines[1].split() == ["BASE", "MODEL", "METHOD", "PRECISION", "GPUS", "ADMITTED", "RUNS", "PEAK", "MEMORY",
                                "GB", "TOKENS/S"], text
    cpu = [line.split() for line in lines[2:] if line.split()[:5] == [MODEL_NAME, "sft", "FP32", "0", "yes"]]
    assert len(cpu) == 1 and int(cpu[0][5]) == row["runs"], text
    # The --jq example of the help works as written.
    one_gpu = strict("base-models", "envelopes", "--jq", ".measurements[] | select(.gpus==1) | .runs", check=True)
    assert one_gpu.stdout.split() == ["0"], one_gpu.stdout


def test_an_advisory_catalog_admits_the_plan_with_the_nearest_row_as_a_warning(bin_dir, tiny_model, tmp_path):
    service = shaped_service(bin_dir, tiny_model, tmp_path, "advisory")
    try:
        cli = prepare(Cli(bin_dir / "trainer", service.url))
        out = cli("runs", "start", "-f", "-", "--force", "--dry-run", "-o", "json", input=bf16(plan_text(2)))
        assert out.returncode == 0, out.stderr
        warnings = json.loads(out.stdout)["warnings"]
        shape = [w for w in warnings if w["field"] == "config.model.precision"]
        assert len(shape) == 1 and "nearest admitted shape is (sft, FP32, 0 gpus)" in shape[0]["message"], warnings
        assert "the shape catalog is advisory" in shape[0]["message"]
        assert cli.json("base-models", "get", MODEL_NAME)["shapeCatalog"] == "advisory"
    finally:
        stop(service.proc, service.data_dir)


@pytest.mark.parametrize("entry,top,words", [
    ({"shapes": [{"method": "ppo", "precision": "FP32", "gpus": 0}]}, {},
     "baseModels[0].shapes[0].method: 'ppo' is not one of sft, grpo, gspo"),
    ({"shapes": [{"method": "sft", "precision": "fp8", "gpus": 0}]}, {},
     "baseModels[0].shapes[0].precision: 'fp8' is not one of BF16, FP32"),
    ({"shapes": [{"method": "sft", "precision": "FP32", "gpus": -1}]}, {},
     "baseModels[0].shapes[0].gpus: must be a whole number of devices from 0 to 4096, got -1"),
    ({"shapes": [{"method": "sft", "precision": "FP32"}]}, {}, "baseModels[0].shapes[0].gpus: required"),
    ({"shapes": [SHAPES[0], SHAPES[0]]}, {}, "baseModels[0].shapes[1]: the row (sft, FP32, 0 gpus) is listed twice"),
    ({"shapes": {"method": "sft"}}, {}, "baseModels[0].shapes: must be a list"),
    ({}, {"shapeCatalog": "loose"}, "shapeCatalog: must be \"strict\""),
])
def test_a_bad_shape_configuration_is_refused_at_start_by_name(bin_dir, tiny_model, tmp_path, entry, top, words):
    config = tmp_path / "trainerd.json"
    config.write_text(json.dumps({"baseModels": [{"name": MODEL_NAME, "path": str(tiny_model), **entry}], **top}))
    out = subprocess.run([str(bin_dir / "trainerd"), "--data-dir", str(tmp_path / "data"), "--port", "0",
                          "--config", str(config)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2, out
    assert words in out.stderr, out.stderr
