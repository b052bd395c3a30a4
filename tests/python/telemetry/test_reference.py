"""The registry is the specification: every metric and attribute of the user's specification
text is in telemetry/registry.yaml with its words, and in the generated reference document."""
import subprocess
import sys

import yaml

import spec_text
from telemetry_support import REPO, spec_path  # noqa: F401  (fixture)

REGISTRY = REPO / "telemetry" / "registry.yaml"
DOC = REPO / "docs" / "telemetry-reference.md"


def registry():
    return yaml.safe_load(REGISTRY.read_text(encoding="utf-8"))


def test_committed_reference_is_what_the_registry_generates():
    result = subprocess.run([sys.executable, str(REPO / "tools" / "gen_telemetry.py"), str(REGISTRY),
                             "--check-doc", str(DOC)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_every_spec_metric_is_in_the_registry_in_order_with_its_words_kind_and_emitter(spec_path):
    spec = spec_text.parse(spec_path)
    metrics = registry()["metrics"]
    assert len(spec.metrics) == 81
    assert len(metrics) == len(spec.metrics)
    for expected, actual in zip(spec.metrics, metrics):
        assert actual["description"] == expected.description, actual["name"]
        assert actual["kind"] == expected.kind, actual["name"]
        assert actual["emitter"] == expected.emitter, actual["name"]
        assert actual["area"] == expected.area, actual["name"]


def test_every_spec_attribute_is_in_the_registry_with_its_words_type_and_meanings(spec_path):
    spec = spec_text.parse(spec_path)
    attributes = {a["name"]: a for a in registry()["attributes"]}
    assert len(spec.attributes) == 52
    for expected in spec.attributes:
        actual = attributes.get(expected.name)
        assert actual is not None, f"{expected.name} missing from the registry"
        assert actual["description"] == expected.description, expected.name
        if expected.type_line is None:
            assert actual["type"] == "enum", expected.name
            spec_values = [v for v in actual["values"] if v.get("origin") != "design"]
            assert [v["meaning"] for v in spec_values] == expected.meanings, expected.name
        else:
            examples = actual.get("examples") or []
            line = f"Type {actual['type']}" + (f", for example {', '.join(examples)}" if examples else "") + "."
            assert line == expected.type_line, expected.name


def test_every_spec_description_appears_in_the_reference_document(spec_path):
    spec = spec_text.parse(spec_path)
    doc = DOC.read_text(encoding="utf-8")
    missing = []
    texts = [m.description for m in spec.metrics] + [spec.resource_intro]
    for attribute in spec.attributes:
        texts.append(attribute.description)
        texts.extend(attribute.meanings)
        if attribute.type_line:
            texts.append(attribute.type_line)
        texts.append(f"### `{attribute.name}`")
    texts.extend(f"`{name}` ({condition})" for name, condition in spec.resource_conditional)
    lines = spec_path.read_text(encoding="utf-8").split("\n")
    texts.extend([f"# {lines[0]}", lines[1], lines[3]])  # title, introduction, the Emitter column
    texts.extend(f"### {area}" for area in dict.fromkeys(m.area for m in spec.metrics))
    for text in texts:
        if text not in doc:
            missing.append(text)
    assert not missing, "not in docs/telemetry-reference.md:\n" + "\n".join(missing)


def test_names_the_issue_fixes_are_kept():
    by_name = {m["name"]: m for m in registry()["metrics"]}
    p = "akka.optimize.training."
    claims = by_name[p + "pool.claims"]
    assert (claims["kind"], claims["unit"], claims["emitter"]) == ("gauge", "{claim}", "service")
    assert claims["attributes"] == [p + "claim.state", p + "instance", p + "pool.accelerator", p + "pool.serving"]
    assert by_name[p + "pool.devices.claimed"]["attributes"] == claims["attributes"]
    for name in ("pool.devices.declared", "pool.devices.observed"):
        assert by_name[p + name]["unit"] == "{device}"
        assert by_name[p + name]["attributes"] == [p + "instance", p + "pool.accelerator", p + "pool.serving"]
    assert by_name[p + "rl.step.count"]["kind"] == "counter"
    assert by_name[p + "sft.step.count"]["kind"] == "counter"
    values = {a["name"]: [v["value"] for v in a.get("values", [])] for a in registry()["attributes"]}
    assert values[p + "claim.state"] == ["GRANTED", "QUEUED"]
    assert set(values[p + "run.phase"]) >= {"QUEUED", "PREPARING", "TRAINING", "PAUSED", "COMPLETED", "FAILED",
                                            "CANCELLED"}
    assert len(values[p + "run.phase"]) == 16
    assert values[p + "pause.policy"] == ["save", "latest"]
    assert sorted(values[p + "checkpoint.artifact.kind"]) == ["trainingState", "weights"]
    assert values[p + "pipeline.stage.type"] == ["curate", "train", "evaluate"]
    assert values[p + "rl.grader.token.type"] == ["input", "output"]
