"""examples/collector.yaml is a Collector configuration the Collector would take: each component's settings against
that component's own config.schema.yaml (vendored, tests/fixtures/schemas/otelcol), with the keys the Collector's
decoder would refuse as unknown refused here too, each exporter's sending_queue as its Validate() checks it, and the
pipelines naming only configured components. examples/otel_traces.sql is the table its clickhouse exporter expects
(create_schema: false).

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

from goodput.exporters.otel_traces import TableSpec, create_table_sql
from goodput.exporters.otlp import RECEIVER_LIMITS
from tests.conftest import FIXTURES, REPO

SCHEMAS = FIXTURES / "schemas" / "otelcol"
EXAMPLE = REPO / "examples" / "collector.yaml"
EXAMPLE_DDL = REPO / "examples" / "otel_traces.sql"
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


def _seconds(duration: str) -> float:
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ns|us|µs|ms|s|m|h)", duration))


def batch_sizer(queue: dict) -> str:
    """The sizer a sending_queue's batch measures by: its own, else the queue's when set (queuebatch.Config.Unmarshal),
    else ``items`` (NewDefaultQueueConfig)."""
    return queue["batch"].get("sizer") or queue.get("sizer") or "items"


def _queue_problems(queue: dict, where: str) -> list[str]:
    """What exporterhelper's queuebatch Config.Validate and BatchConfig.Validate refuse (the schema cannot say)."""
    out = [f"{where}.{k}: must be positive" for k in ("num_consumers", "queue_size") if queue.get(k, 1) <= 0]
    batch = queue.get("batch")
    if batch is None:
        return out
    sizer, lo, hi = batch_sizer(queue), batch.get("min_size", 8192), batch.get("max_size", 0)
    if sizer not in ("items", "bytes"):
        out.append(f"{where}.batch.sizer: batch supports only items or bytes, found {sizer}")
    if _seconds(batch.get("flush_timeout", "200ms")) <= 0:
        out.append(f"{where}.batch.flush_timeout: must be positive")
    if 0 < hi < lo:
        out.append(f"{where}.batch.max_size: {hi} must be greater or equal to min_size ({lo})")
    if sizer == queue.get("sizer", "requests") and lo > queue.get("queue_size", 1000):
        out.append(f"{where}.batch.min_size: must be less than or equal to queue_size")
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
            if isinstance((settings or {}).get("sending_queue"), dict):
                out += _queue_problems(settings["sending_queue"], f"{section}.{cid}.sending_queue")
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
    # as the clickhouseexporter README advises: no batch processor, each exporter batches in its sending_queue
    assert not [p for p in traces["processors"] if p.split("/")[0] == "batch"]
    queue = _example()["exporters"]["otlphttp/goodput"]["sending_queue"]
    assert batch_sizer(queue) == "items" and 0 < queue["batch"]["max_size"] <= RECEIVER_LIMITS.max_spans
    assert batch_sizer(_example()["exporters"]["clickhouse"]["sending_queue"]) == "items"


def test_the_example_ddl_is_the_table_the_clickhouse_exporter_expects():
    ch = _example()["exporters"]["clickhouse"]
    assert ch["create_schema"] is False
    statements = [s.strip() for s in re.sub(r"(?m)^--.*\n", "", EXAMPLE_DDL.read_text()).split(";") if s.strip()]
    spec = TableSpec(database=ch["database"], table=ch["traces_table_name"], ttl_s=30 * 86400)
    assert statements == [f"CREATE DATABASE IF NOT EXISTS `{spec.database}`", create_table_sql(spec).strip()]


@pytest.mark.parametrize("break_it, problem", [
    (lambda c: c["exporters"]["otlphttp/goodput"]["sending_queue"]["batch"].update(max_sise=10),
     "exporters.otlphttp/goodput.sending_queue.batch.max_sise"),
    (lambda c: c["exporters"]["otlphttp/goodput"]["sending_queue"]["batch"].update(max_size=1000),
     "max_size: 1000 must be greater or equal to min_size (5000)"),
    (lambda c: (q := c["exporters"]["clickhouse"]["sending_queue"]).update(sizer="requests") or q["batch"].pop("sizer"),
     "batch supports only items or bytes, found requests"),  # a batch without its own sizer takes the queue's
    (lambda c: c["exporters"]["clickhouse"]["sending_queue"]["batch"].update(flush_timeout="0s"),
     "batch.flush_timeout: must be positive"),
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
