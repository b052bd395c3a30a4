"""tools/gen_telemetry.py refuses a malformed registry with a message naming what is wrong."""
import subprocess
import sys

import yaml

from telemetry_support import REPO

GENERATOR = REPO / "tools" / "gen_telemetry.py"
REGISTRY = REPO / "telemetry" / "registry.yaml"


def run_on(tmp_path, edit):
    registry = yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))
    edit(registry)
    path = tmp_path / "registry.yaml"
    path.write_text(yaml.safe_dump(registry, sort_keys=False, allow_unicode=True), encoding="utf-8")
    return subprocess.run([sys.executable, str(GENERATOR), str(path), "--header", str(tmp_path / "i.h"),
                           "--source", str(tmp_path / "i.cpp")], capture_output=True, text=True)


def test_the_registry_generates(tmp_path):
    result = run_on(tmp_path, lambda r: None)
    assert result.returncode == 0, result.stderr
    header = (tmp_path / "i.h").read_text()
    assert "class PoolClaims {" in header and "enum class RunPhase : uint8_t {" in header


def test_undeclared_attribute_is_named(tmp_path):
    def edit(r):
        r["metrics"][0]["attributes"].append("akka.optimize.training.claim.stat")
    result = run_on(tmp_path, edit)
    assert result.returncode == 2
    assert ("metric akka.optimize.training.pool.claims: attribute akka.optimize.training.claim.stat "
            "is not declared under attributes") in result.stderr


def test_bad_kind_unit_and_duplicate_value_are_named(tmp_path):
    def edit(r):
        r["metrics"][1]["kind"] = "meter"
        r["metrics"][2]["unit"] = ""
        phase = next(a for a in r["attributes"] if a["name"] == "akka.optimize.training.run.phase")
        phase["values"].append({"value": "queued", "meaning": "again"})
    result = run_on(tmp_path, edit)
    assert result.returncode == 2
    assert "metric akka.optimize.training.pool.devices.claimed: kind must be one of" in result.stderr
    assert "metric akka.optimize.training.pool.devices.declared: unit is empty" in result.stderr
    assert "attribute akka.optimize.training.run.phase: value 'queued' repeats another" in result.stderr
