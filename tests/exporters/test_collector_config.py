"""examples/collector.yaml is a Collector configuration the Collector would take: each component's settings against
that component's own config.schema.yaml (vendored, tests/fixtures/schemas/otelcol), with the keys the Collector's
decoder would refuse as unknown refused here too, and the pipelines naming only configured components.

No otelcol binary exists here, so this is what can be checked without one (docs/collector.md)."""

import copy
import posixpath
import re
from functools import cache

import pytest
import yaml
from jsonschema import Draft202012Validator, FormatChecker
from referencing import Registry
from referencing.jsonschema import DRAFT202012

from goodput.exporters.otlp import RECEIVER_LIMITS
from tests.conftest import FIXTURES, REPO

SCHEMAS = FIXTURES / "schemas" / "otelcol"
EXAMPLE = REPO / "examples" / "collector.yaml"
COMPONENTS = {  # (section, component type) -> its module's schema directory under SCHEMAS
    ("receivers", "otlp"): "core/receiver/otlpreceiver",
    ("processors", "memory_limiter"): "core/processor/memorylimiterprocessor",
    ("processors", "batch"): "core/processor/batchprocessor",
    ("exporters", "otlphttp"): "core/exporter/otlphttpexporter",
    ("exporters", "clickhouse"): "contrib/exporter/clickhouseexporter",
}
_CORE = "go.opentelemetry.io/collector/"
_DURATION = re.compile(r"0|[-+]?((\d+(\.\d*)?|\.\d+)(ns|us|µs|ms|s|m|h))+")  # Go's time.ParseDuration


def _target(ref: str, module: str) -> tuple[str, str]:
    """A schemagen ``$ref`` as (module directory, definition name): ``name`` is this file's ``$defs``,
    ``./path.name`` is relative to this module, ``/path.name`` to its repository, ``go.opentelemetry.io/collector/``
    the core repository's."""
    if "/" not in ref:
        return module, ref
    path, _, name = ref.rpartition(".")
    if path.startswith(_CORE):
        return "core/" + path[len(_CORE):], name
    if path.startswith("/"):
        return module.split("/", 1)[0] + path, name
    return posixpath.normpath(posixpath.join(module, path)), name


@cache
def _document(module: str) -> dict:
    doc = yaml.safe_load((SCHEMAS / module / "config.schema.yaml").read_text())
    if module == "contrib/exporter/clickhouseexporter":
        # schemagen squashes every embedded struct, but config.go embeds configretry.BackOffConfig under its own
        # key (`mapstructure:"retry_on_failure"`), which the Collector decodes as a nested section
        retry = {"$ref": _CORE + "config/configretry.back_off_config"}
        doc["allOf"].remove(retry)
        doc["properties"]["retry_on_failure"] = retry
    return doc


def _definition(ref: str, module: str) -> tuple[dict, str]:
    target, name = _target(ref, module)
    return _document(target)["$defs"][name], target


def _standard(node, module: str):
    """``node`` with every schemagen ``$ref`` made a URI the jsonschema registry resolves."""
    if isinstance(node, list):
        return [_standard(v, module) for v in node]
    if not isinstance(node, dict):
        return node
    out = {k: _standard(v, module) for k, v in node.items()}
    if "$ref" in node:
        target, name = _target(node["$ref"], module)
        out["$ref"] = f"urn:otelcol:{target}#/$defs/{name}"
    return out


@cache
def _registry() -> Registry:
    modules = [p.parent.relative_to(SCHEMAS).as_posix() for p in SCHEMAS.rglob("config.schema.yaml")]
    return Registry().with_resources(
        (f"urn:otelcol:{m}", DRAFT202012.create_resource(_standard(_document(m), m))) for m in modules)


def _known_keys(schema: dict, module: str) -> tuple[dict[str, tuple[dict, str]], bool]:
    """The keys an object may hold (each with its schema and module), and whether any other key is allowed."""
    keys = {k: (v, module) for k, v in schema.get("properties", {}).items()}
    open_ = "additionalProperties" in schema
    parts = [(part, module) for part in schema.get("allOf", [])]
    if "$ref" in schema:
        parts.append(_definition(schema["$ref"], module))
    for part, part_module in parts:
        more, more_open = _known_keys(part, part_module)
        keys |= more
        open_ = open_ or more_open
    return keys, open_


def _unknown_keys(value, schema: dict, module: str, where: str) -> list[str]:
    """Every key in ``value`` (at any depth) that no property of ``schema`` names."""
    if not isinstance(value, dict):
        return []
    keys, open_ = _known_keys(schema, module)
    out = []
    for k, v in value.items():
        if k in keys:
            out += _unknown_keys(v, *keys[k], f"{where}.{k}")
        elif not open_:
            out.append(f"{where}.{k}")
    return out


def problems(config: dict) -> list[str]:
    """What the Collector would refuse in ``config``, one line each."""
    checker = FormatChecker()
    checker.checks("duration")(lambda v: not isinstance(v, str) or bool(_DURATION.fullmatch(v)))
    out = []
    for section in ("receivers", "processors", "exporters"):
        for cid, settings in (config.get(section) or {}).items():
            module = COMPONENTS.get((section, cid.split("/", 1)[0]))
            if module is None:
                out.append(f"{section}.{cid}: no vendored schema for this component")
                continue
            schema = {"$ref": f"urn:otelcol:{module}"}
            validator = Draft202012Validator(schema, registry=_registry(), format_checker=checker)
            out += [f"{section}.{cid}.{'.'.join(map(str, e.absolute_path))}: {e.message}"
                    for e in validator.iter_errors(settings or {})]
            out += [f"{k}: not a setting of {module.rsplit('/', 1)[1]}"
                    for k in _unknown_keys(settings or {}, _document(module), module, f"{section}.{cid}")]
    for name, pipeline in config.get("service", {}).get("pipelines", {}).items():
        for section in ("receivers", "processors", "exporters"):
            out += [f"service.pipelines.{name}.{section}: {cid} is not configured"
                    for cid in pipeline.get(section, []) if cid not in (config.get(section) or {})]
        if not pipeline.get("receivers") or not pipeline.get("exporters"):
            out.append(f"service.pipelines.{name}: needs a receiver and an exporter")
    return out


def _example() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def test_the_example_collector_config_is_valid():
    assert problems(_example()) == []


def test_the_example_fans_one_receiver_out_to_clickhouse_and_goodput():
    traces = _example()["service"]["pipelines"]["traces"]
    assert traces["receivers"] == ["otlp"] and set(traces["exporters"]) == {"clickhouse", "otlphttp/goodput"}
    assert _example()["processors"]["batch"]["send_batch_max_size"] <= RECEIVER_LIMITS.max_spans


@pytest.mark.parametrize("break_it, problem", [
    (lambda c: c["processors"]["batch"].update(send_batch_max_sise=10), "processors.batch.send_batch_max_sise"),
    (lambda c: c["exporters"]["otlphttp/goodput"]["retry_on_failure"].update(max_interval="30 seconds"),
     "'30 seconds' is not a 'duration'"),
    (lambda c: c["exporters"]["clickhouse"].update(create_schema="yes"), "'yes' is not of type 'boolean'"),
    (lambda c: c["exporters"]["clickhouse"]["retry_on_failure"].update(multiplier_x=2),
     "exporters.clickhouse.retry_on_failure.multiplier_x"),
    (lambda c: c["receivers"]["otlp"]["protocols"]["http"].update(endpont="x"), "receivers.otlp.protocols.http.endpont"),
    (lambda c: c["service"]["pipelines"]["traces"]["exporters"].append("otlphttp/nowhere"), "otlphttp/nowhere is not"),
])
def test_a_broken_config_is_caught(break_it, problem):
    config = copy.deepcopy(_example())
    break_it(config)
    assert any(problem in p for p in problems(config)), problems(config)
