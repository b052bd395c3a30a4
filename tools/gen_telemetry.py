#!/usr/bin/env python3
"""Generates the typed C++ instruments and the telemetry reference from telemetry/registry.yaml.

    gen_telemetry.py REGISTRY --header OUT.h --source OUT.cpp   (run by the build)
    gen_telemetry.py REGISTRY --doc OUT.md                      (docs/telemetry-reference.md)
    gen_telemetry.py REGISTRY --check-doc docs/telemetry-reference.md   (exit 1 if it differs)

The registry is validated first; any error names the metric or attribute and the field.
"""
from __future__ import annotations

import argparse
import difflib
import pathlib
import re
import sys

import yaml

KINDS = {"counter", "gauge", "histogram"}
EMITTERS = {"service", "job"}
ATTRIBUTE_TYPES = {"string", "int", "double", "boolean", "enum"}
VALUE_TYPES = {"int", "double"}
NAME = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
ENUM_VALUE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")
CPP_KEYWORDS = {"delete", "default", "export", "register", "new", "class", "int", "double", "bool"}


class RegistryError(Exception):
    pass


# ---- Loading and validation ------------------------------------------------------------------


def load(path: pathlib.Path) -> dict:
    registry = yaml.safe_load(path.read_text(encoding="utf-8"))
    validate(registry)
    return registry


def validate(reg: dict) -> None:
    errors: list[str] = []
    prefix = reg["prefix"] + "."
    attributes = {}
    for attribute in reg["attributes"]:
        name = attribute.get("name", "?")
        where = f"attribute {name}"
        if not NAME.match(name):
            errors.append(f"{where}: name is not a dotted lower-case name")
        if name in attributes:
            errors.append(f"{where}: declared twice")
        attributes[name] = attribute
        if attribute.get("type") not in ATTRIBUTE_TYPES:
            errors.append(f"{where}: type must be one of {sorted(ATTRIBUTE_TYPES)}")
        if not attribute.get("description"):
            errors.append(f"{where}: description is empty")
        if attribute.get("type") == "enum":
            values = attribute.get("values") or []
            if not values:
                errors.append(f"{where}: an enum needs values")
            seen = set()
            for v in values:
                if not ENUM_VALUE.match(str(v.get("value", ""))):
                    errors.append(f"{where}: value {v.get('value')!r} is not an identifier")
                if enumerator(str(v.get("value"))) in seen:
                    errors.append(f"{where}: value {v.get('value')!r} repeats another")
                seen.add(enumerator(str(v.get("value"))))
                if not v.get("meaning"):
                    errors.append(f"{where}: value {v.get('value')!r} has no meaning")
        elif "values" in attribute:
            errors.append(f"{where}: values given for a non-enum type")
    names = set()
    areas = reg["areas"]
    for metric in reg["metrics"]:
        name = metric.get("name", "?")
        where = f"metric {name}"
        if not name.startswith(prefix) or not NAME.match(name):
            errors.append(f"{where}: name must be dotted and start with {prefix}")
        if name in names:
            errors.append(f"{where}: declared twice")
        names.add(name)
        if metric.get("area") not in areas:
            errors.append(f"{where}: area {metric.get('area')!r} is not in areas")
        if metric.get("kind") not in KINDS:
            errors.append(f"{where}: kind must be one of {sorted(KINDS)}")
        if metric.get("emitter") not in EMITTERS:
            errors.append(f"{where}: emitter must be one of {sorted(EMITTERS)}")
        if metric.get("value_type") not in VALUE_TYPES:
            errors.append(f"{where}: value_type must be one of {sorted(VALUE_TYPES)}")
        if not metric.get("unit"):
            errors.append(f"{where}: unit is empty (use 1 for a dimensionless ratio)")
        if not metric.get("description"):
            errors.append(f"{where}: description is empty")
        if metric.get("kind") == "histogram":
            if metric.get("histogram") == "explicit":
                buckets = metric.get("buckets") or []
                if not buckets or any(b >= c for b, c in zip(buckets, buckets[1:])):
                    errors.append(f"{where}: buckets must be a non-empty ascending list")
            elif metric.get("histogram") != "exponential":
                errors.append(f"{where}: histogram must be explicit or exponential")
        elif "histogram" in metric or "buckets" in metric:
            errors.append(f"{where}: histogram/buckets given for a {metric.get('kind')}")
        keys = list(metric.get("attributes", [])) + list(metric.get("optional_attributes", []))
        if len(keys) != len(set(keys)):
            errors.append(f"{where}: an attribute is listed twice")
        for key in keys:
            if key not in attributes:
                errors.append(f"{where}: attribute {key} is not declared under attributes")
    for resource in reg.get("resources", []):
        for entry in resource["attributes"]:
            if entry["name"] not in attributes:
                errors.append(f"resource {resource['name']}: attribute {entry['name']} is not declared")
    if errors:
        raise RegistryError("\n".join(errors))


# ---- Naming ------------------------------------------------------------------------------------


def short_name(reg: dict, name: str) -> str:
    prefix = reg["prefix"] + "."
    return name[len(prefix):] if name.startswith(prefix) else name


def words(text: str) -> list[str]:
    parts = re.split(r"[._\-:]+", text)
    out = []
    for part in parts:
        if part.isupper() or part.islower() or part.isdigit():
            out.append(part)
        else:  # camelCase
            out.extend(re.findall(r"[A-Z]?[a-z0-9]+|[A-Z]+(?![a-z])", part))
    return [w for w in out if w]


def camel(text: str) -> str:
    return "".join(w[:1].upper() + w[1:].lower() for w in words(text))


def snake(text: str) -> str:
    name = "_".join(w.lower() for w in words(text))
    return name + "_" if name in CPP_KEYWORDS else name


def enumerator(value: str) -> str:
    return "k" + camel(value)


def cpp_string(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def comment(text: str, indent: str = "", width: int = 96) -> str:
    lines, line = [], ""
    for word in text.split():
        if line and len(indent) + 3 + len(line) + 1 + len(word) > width:
            lines.append(line)
            line = word
        else:
            line = f"{line} {word}" if line else word
    if line:
        lines.append(line)
    return "\n".join(f"{indent}// {x}" for x in lines)


# ---- Prometheus names (mirrors prometheus_name() in src/telemetry/prometheus.cpp) -------------

UNIT_WORDS = {
    "s": "seconds", "ms": "milliseconds", "us": "microseconds", "ns": "nanoseconds",
    "min": "minutes", "h": "hours", "d": "days", "By": "bytes", "KiBy": "kibibytes",
    "MiBy": "mebibytes", "GiBy": "gibibytes", "Hz": "hertz", "W": "watts", "J": "joules",
    "Cel": "celsius", "%": "percent", "m": "meters", "V": "volts",
}
PER_WORDS = {"s": "second", "min": "minute", "h": "hour", "d": "day", "ms": "millisecond"}


def prometheus_name(metric: dict) -> str:
    name = re.sub(r"[^a-zA-Z0-9_:]", "_", metric["name"])
    unit = re.sub(r"\{[^}]*\}", "", metric["unit"])
    suffixes = []
    main, _, per = unit.partition("/")
    if main == "1" and metric["kind"] == "gauge" and not per:
        suffixes.append("ratio")
    elif main and main != "1":
        suffixes.append(UNIT_WORDS.get(main, main))
    if per:
        suffixes.append("per_" + PER_WORDS.get(per, per))
    for suffix in suffixes:
        suffix = re.sub(r"[^a-zA-Z0-9_:]", "_", suffix)
        if not name.endswith("_" + suffix):
            name += "_" + suffix
    if metric["kind"] == "counter" and not name.endswith("_total"):
        name += "_total"
    return re.sub(r"__+", "_", name)


# ---- C++ ---------------------------------------------------------------------------------------

CPP_TYPES = {"string": "std::string_view", "int": "int64_t", "double": "double", "boolean": "bool"}


def attr_cpp_type(reg: dict, attribute: dict) -> str:
    if attribute["type"] == "enum":
        return camel(short_name(reg, attribute["name"]))
    return CPP_TYPES[attribute["type"]]


def attr_value_expr(reg: dict, attribute: dict, expr: str) -> str:
    t = attribute["type"]
    if t == "enum":
        return f"std::string(to_string({expr}))"
    if t == "string":
        return f"std::string({expr})"
    if t == "int":
        return f"static_cast<int64_t>({expr})"
    return f"{expr}"


def attr_ref_expr(attribute: dict, expr: str) -> str:
    t = attribute["type"]
    if t == "enum":
        return f"AttributeValueRef(to_string({expr}))"
    if t == "string":
        return f"AttributeValueRef(std::string_view({expr}))"
    if t == "int":
        return f"AttributeValueRef(static_cast<int64_t>({expr}))"
    if t == "double":
        return f"AttributeValueRef(static_cast<double>({expr}))"
    return f"AttributeValueRef(static_cast<bool>({expr}))"


def kind_cpp(metric: dict) -> str:
    if metric["kind"] == "counter":
        return "InstrumentKind::kCounter"
    if metric["kind"] == "gauge":
        return "InstrumentKind::kGauge"
    if metric.get("histogram") == "exponential":
        return "InstrumentKind::kExponentialHistogram"
    return "InstrumentKind::kHistogram"


def fmt_double(x) -> str:
    text = repr(float(x))
    return text


def generate_header(reg: dict) -> str:
    attrs = {a["name"]: a for a in reg["attributes"]}
    out = []
    w = out.append
    w("// Generated from telemetry/registry.yaml by tools/gen_telemetry.py. Do not edit.")
    w("//")
    w("// Typed instruments: every metric of the registry is a class whose methods take its")
    w("// declared attributes as a struct of typed fields, enumerations as enum classes. A metric,")
    w("// attribute key or value the registry does not declare does not compile; a required")
    w("// attribute left out does not compile either (Required<T> has no default).")
    w("#pragma once")
    w("")
    w("#include <atomic>")
    w("#include <concepts>")
    w("#include <cstdint>")
    w("#include <optional>")
    w("#include <string_view>")
    w("#include <type_traits>")
    w("#include <vector>")
    w("")
    w('#include "telemetry/telemetry.h"')
    w("")
    w("namespace trainer::telemetry {")
    w("")
    w("// A field that must be given: no default constructor. Converts from what T converts from,")
    w("// except that a bool takes only a bool.")
    w("template <typename T>")
    w("class Required {")
    w(" public:")
    w("  template <typename U>")
    w("    requires std::is_convertible_v<U&&, T> &&")
    w("             (!std::is_same_v<T, bool> || std::is_same_v<std::remove_cvref_t<U>, bool>)")
    w("  Required(U&& value) : value_(static_cast<T>(std::forward<U>(value))) {}  // NOLINT: implicit by design")
    w("  const T& get() const { return value_; }")
    w("  operator const T&() const { return value_; }  // NOLINT: implicit by design")
    w("")
    w(" private:")
    w("  T value_;")
    w("};")
    w("")
    w("// ---- Enumerated attribute values -------------------------------------------------------")
    for a in reg["attributes"]:
        if a["type"] != "enum":
            continue
        cls = camel(short_name(reg, a["name"]))
        w("")
        w(comment(f"{a['name']}: {a['description']}"))
        w(f"enum class {cls} : uint8_t {{")
        for v in a["values"]:
            w(f"  {enumerator(str(v['value']))},  // {v['value']}")
        w("};")
        w(f"// The registry's spelling of the value, e.g. \"{a['values'][0]['value']}\".")
        w(f"std::string_view to_string({cls} value);")
    w("")
    w("// ---- Attribute keys ------------------------------------------------------------------")
    w("namespace attr {")
    for a in reg["attributes"]:
        w(f"inline constexpr std::string_view k{camel(short_name(reg, a['name']))} = {cpp_string(a['name'])};")
    w("}  // namespace attr")
    w("")
    w("// ---- Instruments ---------------------------------------------------------------------")
    w("namespace metrics {")
    for m in reg["metrics"]:
        cls = camel(short_name(reg, m["name"]))
        keys = list(m["attributes"])
        optional = list(m.get("optional_attributes", []))
        vt = "int64_t" if m["value_type"] == "int" else "double"
        kindword = m["kind"] if m["kind"] != "histogram" else f"{m['histogram']} histogram"
        w("")
        w(comment(f"{m['name']} ({kindword}, {m['unit']}, {m['emitter']}; Prometheus "
                  f"{prometheus_name(m)}): {m['description']}"))
        has_attrs = bool(keys or optional)
        if has_attrs:
            w(f"struct {cls}Attributes {{")
            for k in keys:
                w(f"  Required<{attr_cpp_type(reg, attrs[k])}> {snake(short_name(reg, k))};  // {k}")
            for k in optional:
                w(f"  std::optional<{attr_cpp_type(reg, attrs[k])}> {snake(short_name(reg, k))} = std::nullopt;  // {k}, when it applies")
            w("};")
            w(f"AttributeSet to_attribute_set(const {cls}Attributes& attributes);")
            w(f"// The series of `attributes`, found without allocating once it exists.")
            w(f"Series* series_for(Instrument& instrument, const {cls}Attributes& attributes);")
        w(f"class {cls} {{")
        w(" public:")
        if has_attrs:
            w(f"  using Attributes = {cls}Attributes;")
        w("  static const InstrumentDescriptor& descriptor();")
        w(f"  static constexpr std::string_view kPrometheusName = {cpp_string(prometheus_name(m))};")
        w(f"  explicit {cls}(MeterProvider& provider) : instrument_(&provider.instrument(descriptor())) {{}}")
        if has_attrs:
            if m["kind"] == "counter":
                w(f"  void add({vt} value, const Attributes& attributes) {{ bind(attributes).add(static_cast<double>(value)); }}")
                w("  // A handle for the hot path; the series is published (from zero) from now on.")
                w("  CounterHandle bind(const Attributes& attributes) { return CounterHandle(series_for(*instrument_, attributes)); }")
            elif m["kind"] == "gauge":
                w(f"  void set({vt} value, const Attributes& attributes) {{ bind(attributes).set(static_cast<double>(value)); }}")
                w("  // Withdraws the series until the next set().")
                w("  void clear(const Attributes& attributes) { bind(attributes).clear(); }")
                w("  GaugeHandle bind(const Attributes& attributes) { return GaugeHandle(series_for(*instrument_, attributes)); }")
            else:
                w(f"  void record({vt} value, const Attributes& attributes) {{ bind(attributes).record(static_cast<double>(value)); }}")
                w("  HistogramHandle bind(const Attributes& attributes) { return HistogramHandle(series_for(*instrument_, attributes)); }")
            w("")
            w(" private:")
            w("  Instrument* instrument_;")
        else:
            if m["kind"] == "counter":
                w(f"  void add({vt} value) {{ series()->add(static_cast<double>(value)); }}")
                w("  // A handle for the hot path; the series is published (from zero) from now on.")
                w("  CounterHandle bind() { return CounterHandle(series()); }")
            elif m["kind"] == "gauge":
                w(f"  void set({vt} value) {{ series()->set(static_cast<double>(value)); }}")
                w("  void clear() { series()->clear(); }")
                w("  GaugeHandle bind() { return GaugeHandle(series()); }")
            else:
                w(f"  void record({vt} value) {{ series()->record(static_cast<double>(value)); }}")
                w("  HistogramHandle bind() { return HistogramHandle(series()); }")
            w("")
            w(" private:")
            w("  // The one series, created on first use so that an unused metric is not published.")
            w("  Series* series() {")
            w("    Series* s = series_.load(std::memory_order_acquire);")
            w("    if (s == nullptr) {")
            w("      s = instrument_->series(AttributeSet{});")
            w("      series_.store(s, std::memory_order_release);")
            w("    }")
            w("    return s;")
            w("  }")
            w("  Instrument* instrument_;")
            w("  std::atomic<Series*> series_{nullptr};")
        w("};")
    w("")
    w("}  // namespace metrics")
    for emitter, cls in (("service", "ServiceMetrics"), ("job", "JobMetrics")):
        w("")
        who = "the trainer service (trainerd)" if emitter == "service" else "the training job (trainer-job)"
        w(f"// Every metric {who} publishes. Construct one per MeterProvider; thread-safe.")
        w(f"struct {cls} {{")
        w(f"  explicit {cls}(MeterProvider& provider);")
        for m in reg["metrics"]:
            if m["emitter"] == emitter:
                w(f"  metrics::{camel(short_name(reg, m['name']))} {snake(short_name(reg, m['name']))};")
        w("};")
    for resource in reg.get("resources", []):
        cls = camel(resource["name"])
        w("")
        w(comment(f"{resource['name']}: {resource['description']}"))
        w(f"struct {cls} {{")
        for entry in resource["attributes"]:
            a = attrs[entry["name"]]
            field = snake(short_name(reg, a["name"]))
            if "condition" in entry:
                w(f"  std::optional<{attr_cpp_type(reg, a)}> {field} = std::nullopt;  // {a['name']}, {entry['condition']}")
            else:
                w(f"  Required<{attr_cpp_type(reg, a)}> {field};  // {a['name']}")
        w("")
        w("  // The resource with these attributes and service.name = `service_name`.")
        w("  Resource to_resource(std::string_view service_name) const;")
        w("};")
    w("")
    w("// Every metric of the registry, in registry order.")
    w("const std::vector<const InstrumentDescriptor*>& all_metric_descriptors();")
    w("// The Prometheus name of each, in the same order (as the reference document lists them).")
    w("const std::vector<std::string_view>& all_metric_prometheus_names();")
    w("")
    w("}  // namespace trainer::telemetry")
    w("")
    return "\n".join(out)


def generate_source(reg: dict) -> str:
    attrs = {a["name"]: a for a in reg["attributes"]}
    out = []
    w = out.append
    w("// Generated from telemetry/registry.yaml by tools/gen_telemetry.py. Do not edit.")
    w('#include "telemetry/instruments.h"')
    w("")
    w("#include <string>")
    w("")
    w("namespace trainer::telemetry {")
    for a in reg["attributes"]:
        if a["type"] != "enum":
            continue
        cls = camel(short_name(reg, a["name"]))
        w("")
        w(f"std::string_view to_string({cls} value) {{")
        w("  switch (value) {")
        for v in a["values"]:
            w(f"    case {cls}::{enumerator(str(v['value']))}: return {cpp_string(str(v['value']))};")
        w("  }")
        w('  return "";')
        w("}")
    w("")
    w("namespace metrics {")
    for m in reg["metrics"]:
        cls = camel(short_name(reg, m["name"]))
        keys = list(m["attributes"])
        optional = list(m.get("optional_attributes", []))
        w("")
        w(f"const InstrumentDescriptor& {cls}::descriptor() {{")
        w("  static const InstrumentDescriptor kDescriptor{")
        w(f"      .name = {cpp_string(m['name'])},")
        w(f"      .description = {cpp_string(m['description'])},")
        w(f"      .unit = {cpp_string(m['unit'])},")
        w(f"      .kind = {kind_cpp(m)},")
        w(f"      .value_type = {'ValueType::kInt' if m['value_type'] == 'int' else 'ValueType::kDouble'},")
        if m.get("histogram") == "explicit":
            w("      .buckets = {" + ", ".join(fmt_double(b) for b in m["buckets"]) + "},")
        w("  };")
        w("  return kDescriptor;")
        w("}")
        if keys or optional:
            w("")
            w(f"AttributeSet to_attribute_set(const {cls}Attributes& attributes) {{")
            w("  std::vector<Attribute> list;")
            w(f"  list.reserve({len(keys) + len(optional)});")
            for k in keys:
                f = snake(short_name(reg, k))
                w(f"  list.push_back({{{cpp_string(k)}, {attr_value_expr(reg, attrs[k], f'attributes.{f}.get()')}}});")
            for k in optional:
                f = snake(short_name(reg, k))
                w(f"  if (attributes.{f}) list.push_back({{{cpp_string(k)}, {attr_value_expr(reg, attrs[k], f'*attributes.{f}')}}});")
            w("  return AttributeSet(std::move(list));")
            w("}")
            w("")
            w(f"Series* series_for(Instrument& instrument, const {cls}Attributes& attributes) {{")
            w(f"  AttributeRef refs[{len(keys) + len(optional)}];")
            w("  size_t n = 0;")
            for k in sorted(keys + optional):  # sorted by key, as Instrument::series requires
                f = snake(short_name(reg, k))
                if k in optional:
                    w(f"  if (attributes.{f}) refs[n++] = {{{cpp_string(k)}, {attr_ref_expr(attrs[k], f'*attributes.{f}')}}};")
                else:
                    w(f"  refs[n++] = {{{cpp_string(k)}, {attr_ref_expr(attrs[k], f'attributes.{f}.get()')}}};")
            w("  return instrument.series(std::span<const AttributeRef>(refs, n));")
            w("}")
    w("")
    w("}  // namespace metrics")
    for emitter, cls in (("service", "ServiceMetrics"), ("job", "JobMetrics")):
        members = [snake(short_name(reg, m["name"])) for m in reg["metrics"] if m["emitter"] == emitter]
        w("")
        w(f"{cls}::{cls}(MeterProvider& provider)")
        w("    : " + ",\n      ".join(f"{x}(provider)" for x in members) + " {}")
    for resource in reg.get("resources", []):
        cls = camel(resource["name"])
        w("")
        w(f"Resource {cls}::to_resource(std::string_view service_name) const {{")
        w("  std::vector<Attribute> list;")
        w('  list.push_back({"service.name", std::string(service_name)});')
        for entry in resource["attributes"]:
            a = attrs[entry["name"]]
            f = snake(short_name(reg, a["name"]))
            if "condition" in entry:
                w(f"  if ({f}) list.push_back({{{cpp_string(a['name'])}, {attr_value_expr(reg, a, f'*{f}')}}});")
            else:
                w(f"  list.push_back({{{cpp_string(a['name'])}, {attr_value_expr(reg, a, f'{f}.get()')}}});")
        w("  return Resource{AttributeSet(std::move(list))};")
        w("}")
    w("")
    w("const std::vector<const InstrumentDescriptor*>& all_metric_descriptors() {")
    w("  static const std::vector<const InstrumentDescriptor*> kAll{")
    for m in reg["metrics"]:
        w(f"      &metrics::{camel(short_name(reg, m['name']))}::descriptor(),")
    w("  };")
    w("  return kAll;")
    w("}")
    w("")
    w("const std::vector<std::string_view>& all_metric_prometheus_names() {")
    w("  static const std::vector<std::string_view> kAll{")
    for m in reg["metrics"]:
        w(f"      metrics::{camel(short_name(reg, m['name']))}::kPrometheusName,")
    w("  };")
    w("  return kAll;")
    w("}")
    w("")
    w("}  // namespace trainer::telemetry")
    w("")
    return "\n".join(out)


# ---- Reference document --------------------------------------------------------------------


def cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def type_line(attribute: dict) -> str:
    examples = attribute.get("examples") or []
    if examples:
        return f"Type {attribute['type']}, for example {', '.join(str(e) for e in examples)}."
    return f"Type {attribute['type']}."


def generate_doc(reg: dict) -> str:
    out = []
    w = out.append
    w(f"# {reg['title']}")
    w("")
    w("<!-- Generated from telemetry/registry.yaml by tools/gen_telemetry.py. Do not edit:")
    w("     edit the registry, then run tools/gen_telemetry.py telemetry/registry.yaml --doc docs/telemetry-reference.md -->")
    w("")
    w(reg["introduction"])
    w("")
    w("## Metrics")
    w("")
    w(reg["metrics_introduction"] + " Below each name is the name Prometheus shows it under.")
    for area in reg["areas"]:
        w("")
        w(f"### {area}")
        w("")
        w("| Metric | Kind | Unit | Emitter | Attributes | Description |")
        w("|---|---|---|---|---|---|")
        for m in reg["metrics"]:
            if m["area"] != area:
                continue
            kind = m["kind"] if m["kind"] != "histogram" else (
                "histogram (exponential)" if m["histogram"] == "exponential" else "histogram")
            keys = [f"`{k}`" for k in m["attributes"]]
            keys += [f"`{k}` (when it applies)" for k in m.get("optional_attributes", [])]
            w(f"| `{m['name']}`<br>`{prometheus_name(m)}` | {kind} | `{cell(m['unit'])}` | {m['emitter']} "
              f"| {'<br>'.join(keys)} | {cell(m['description'])} |")
    for resource in reg.get("resources", []):
        w("")
        w(f"## {resource['name']}")
        w("")
        w(resource["description"])
        w("")
        for entry in resource["attributes"]:
            condition = f" ({entry['condition']})" if "condition" in entry else ""
            w(f"- `{entry['name']}`{condition}")
    w("")
    w("## Attributes")
    for a in reg["attributes"]:
        w("")
        w(f"### `{a['name']}`")
        w("")
        w(a["description"])
        w("")
        if a["type"] == "enum":
            w("| Value | Meaning |")
            w("|---|---|")
            for v in a["values"]:
                design = " Not in the specification's copy: added by design." if v.get("origin") == "design" else ""
                w(f"| `{v['value']}` | {cell(v['meaning'])}{design} |")
        else:
            w(type_line(a))
        carried = [f"`{m['name']}`" for m in reg["metrics"]
                   if a["name"] in m["attributes"] or a["name"] in m.get("optional_attributes", [])]
        resources = [r["name"] for r in reg.get("resources", [])
                     if any(e["name"] == a["name"] for e in r["attributes"])]
        w("")
        if carried:
            w(f"Carried by {', '.join(carried)}.")
        if resources:
            w(f"On the {', '.join(resources)}.")
        if not carried and not resources:
            w("Carried by no metric.")
        if a.get("origin") == "design":
            w("")
            w("Not in the specification's copy: added by design.")
    w("")
    return "\n".join(out)


# ---- Command line ----------------------------------------------------------------------------


def write_if_changed(path: pathlib.Path, text: str) -> None:
    if path.exists() and path.read_text(encoding="utf-8") == text:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("registry", type=pathlib.Path)
    parser.add_argument("--header", type=pathlib.Path, help="write the C++ header here")
    parser.add_argument("--source", type=pathlib.Path, help="write the C++ source here")
    parser.add_argument("--doc", type=pathlib.Path, help="write the reference document here")
    parser.add_argument("--check-doc", type=pathlib.Path, help="exit 1 if this document differs")
    args = parser.parse_args(argv)
    try:
        reg = load(args.registry)
    except RegistryError as error:
        print(f"{args.registry}: invalid registry:\n{error}", file=sys.stderr)
        return 2
    if args.header:
        write_if_changed(args.header, generate_header(reg))
    if args.source:
        write_if_changed(args.source, generate_source(reg))
    if args.doc:
        write_if_changed(args.doc, generate_doc(reg))
    if args.check_doc:
        expected = generate_doc(reg)
        actual = args.check_doc.read_text(encoding="utf-8") if args.check_doc.exists() else ""
        if actual != expected:
            diff = difflib.unified_diff(actual.splitlines(), expected.splitlines(),
                                        str(args.check_doc), "generated from the registry", lineterm="")
            print("\n".join(list(diff)[:80]), file=sys.stderr)
            print(f"{args.check_doc} differs from what {args.registry} generates: run "
                  f"tools/gen_telemetry.py {args.registry} --doc {args.check_doc}", file=sys.stderr)
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
