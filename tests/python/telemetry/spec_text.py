"""Parser of the user's specification text (spec/telemetry-reference.txt).

The copy lost metric names, units and attribute lists; what survives is the area headings,
each metric's kind, emitter and description, and every attribute's name, description, type
line and enumeration meanings. This module reads exactly that, in order.
"""
import dataclasses
import pathlib
import re

KINDS = ("gauge", "counter", "histogram")
EMITTERS = ("service", "job")
ATTRIBUTE_NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")


@dataclasses.dataclass
class SpecMetric:
    area: str
    kind: str
    emitter: str
    description: str


@dataclasses.dataclass
class SpecAttribute:
    name: str
    description: str
    type_line: str | None  # "Type string, for example x." or None for an enumeration
    meanings: list[str]  # the Meaning column of an enumeration, in order


@dataclasses.dataclass
class Spec:
    metrics: list[SpecMetric]
    attributes: list[SpecAttribute]
    resource_intro: str
    resource_conditional: list[tuple[str, str]]  # (attribute, condition)


def _cell(line: str) -> str:
    return line[:-2] if line.endswith(" |") else line


def parse(path: pathlib.Path) -> Spec:
    lines = path.read_text(encoding="utf-8").split("\n")
    i = lines.index("Metrics")
    end = lines.index("Spans")
    metrics: list[SpecMetric] = []
    area = ""
    while i < end:
        line = lines[i]
        if line in (f"{k} |" for k in KINDS):
            kind = line[:-2]
            j = i + 1
            while lines[j] not in (f"{e} |" for e in EMITTERS):
                j += 1
            emitter = lines[j][:-2]
            j += 1
            while lines[j] == "|":
                j += 1
            metrics.append(SpecMetric(area, kind, emitter, _cell(lines[j])))
            i = j + 1
            continue
        if (line and not line.startswith("|") and line not in ("Metrics",)
                and not line.startswith("In the Emitter column")):
            area = line
        i += 1

    r = lines.index("Training job resource")
    resource_intro = lines[r + 1]
    resource_conditional = []
    k = r + 2
    while lines[k] != "Attributes":
        m = re.match(r"^-?\s*([a-z0-9_.]+)\((.*)\)\s*-?$", lines[k])
        if m:
            resource_conditional.append((m.group(1), m.group(2)))
        k += 1

    attributes: list[SpecAttribute] = []
    k += 1
    while k < len(lines):
        name = lines[k]
        if not ATTRIBUTE_NAME.match(name):
            k += 1
            continue
        description = lines[k + 1]
        k += 2
        type_line = None
        meanings: list[str] = []
        if k < len(lines) and lines[k].startswith("Type "):
            type_line = lines[k]
            k += 1
        elif k < len(lines) and lines[k].startswith("| Value"):
            k += 2
            while k < len(lines) and (lines[k] == "|" or lines[k].endswith(" |")):
                if lines[k] != "|":
                    meanings.append(_cell(lines[k]))
                k += 1
        attributes.append(SpecAttribute(name, description, type_line, meanings))
    return Spec(metrics, attributes, resource_intro, resource_conditional)
