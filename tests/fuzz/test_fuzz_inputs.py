"""Every file reader and body parser, fed what Hypothesis makes: from scratch (JSON-like trees over each reader's own
keys, raw text, deep nesting) and by mutating the real inputs (examples/, tests/fixtures/, rules/slos.yaml: a value
replaced, a key dropped, a value wrapped in a list, a huge or a non-finite number put in).

Each must answer with its documented error as one line (``ConfigError``; ``OtlpError``; ``PromError``; the OpenAI
API's ``ApiError`` with a 4xx) or accept the input; a fleet whose gateway or disaggregation section is accepted must
replay a few virtual seconds; never another exception, and never more than ``MEMORY_LIMIT`` of
Python memory (tracemalloc peak) for inputs this small. Bounded: a fixed ``max_examples`` per reader and a fixed seed
(``derandomize``), so the suite runs the same in CI, in well under 90 s.

Server replies are inputs too: the ClickHouse sink is fed a drawn script of a real local HTTP server's misbehaviours
(tests/exporters/test_clickhouse_store.py's ``FakeClickHouse``: lies, stalls, streams, resets) between flushes and
restarts on its write-ahead log, and must store every acknowledged span exactly once.
"""

from __future__ import annotations

import copy
import json
import math
import tempfile
import tracemalloc
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from goodput.analyzer.releases import load_releases
from goodput.exporters.config import load_plan, load_targets
from goodput.exporters.otlp import OtlpError, decode_json, decode_protobuf
from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.promapi import PromError, parse_answer, read_json
from goodput.foundation.yamlfile import load_yaml
from goodput.loadtest.imports import import_run
from goodput.loadtest.slo import parse_slo
from goodput.monitoring.rulegen import load_spec
from goodput.plan.demand import parse_demand
from goodput.plan.disaggfile import load_disagg
from goodput.plan.planfile import load_plan_file
from goodput.plan.policyfile import load_policy_file
from goodput.plan.prices import load_prices
from goodput.simulator.config import parse_fleet
from goodput.simulator.openai_protocol import CHAT, COMPLETIONS, ApiError, parse_body, validate
from goodput.simulator.run import simulate
from tests.conftest import REPO
from tests.plan.plan_fixtures import CHAT as CHAT_DEMAND

pytestmark = pytest.mark.slow  # long: dealt out first (tests/conftest.py)

MEMORY_LIMIT = 64 * 2**20
FUZZ = settings(max_examples=40, deadline=timedelta(seconds=10), derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
FUZZ_REPLAYS = settings(FUZZ, max_examples=100)  # the fleet sections: most examples refused at once, a few replayed
FIX = REPO / "tests" / "fixtures"

# ---------------------------------------------------------------------- what is fed


def _yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


STRINGS = ["", "chat", "P0", "P1", "poisson", "gamma", "batch", "Llama-3.1-8B", "H100-80GB-SXM", "fp8", "1e9", "nan",
           "-1", "http://127.0.0.1:9/metrics", "javascript:alert(1)", "{{ $labels.x }}", "[[[[", "caf\u00e9", "\x00",
           "2026-11-23T09:00:00Z", "not a time", "a" * 300]
SCALARS = (st.none() | st.booleans() | st.integers(-2**70, 2**70) | st.sampled_from([0, 1, -1, 2**63, 10**9])
           | st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from(STRINGS) | st.text(max_size=12))


def trees(keys: list[str]) -> st.SearchStrategy:
    """JSON-like values whose mapping keys are mostly the reader's own, so the reader gets past its first check."""
    key = st.sampled_from(keys) | st.text(max_size=6)
    return st.recursive(SCALARS, lambda c: st.lists(c, max_size=4) | st.dictionaries(key, c, max_size=5),
                        max_leaves=30)


def _slots(doc: Any) -> Iterator[tuple[Any, Any]]:
    """Every (container, key or index) of a tree."""
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield doc, k
            yield from _slots(v)
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield doc, i
            yield from _slots(v)


@st.composite
def mutated(draw: st.DrawFn, original: Any, keys: list[str]) -> Any:
    """``original`` with one to three mutations at slots Hypothesis picks."""
    doc = copy.deepcopy(original)
    for _ in range(draw(st.integers(1, 3))):
        slots = list(_slots(doc))
        if not slots:
            return draw(trees(keys))
        container, k = draw(st.sampled_from(slots))
        op = draw(st.sampled_from(["replace", "replace", "drop", "wrap", "extreme"]))
        if op == "drop":
            del container[k]
        elif op == "wrap":
            container[k] = [container[k]]
        elif op == "extreme":
            container[k] = draw(st.sampled_from([2**63, -2**63, 10**12, 1e300, -1e300, math.nan, math.inf, 0, -1, ""]))
        else:
            container[k] = draw(trees(keys))
    return doc


@st.composite
def retuned(draw: st.DrawFn, original: Any) -> Any:
    """``original`` with some numbers redrawn between 0 and four times their value (the ends often) and some keys
    dropped: mostly still valid, so what follows the reader's checks (a replay) gets configurations no example has."""
    doc = copy.deepcopy(original)
    for container, k in list(_slots(doc)):
        v = container[k]
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not draw(st.booleans()):
            continue
        between: st.SearchStrategy = (st.integers(min(0, 4 * v), max(0, 4 * v)) if isinstance(v, int)
                                      else st.floats(min(0.0, 4 * v), max(0.0, 4 * v), allow_subnormal=False))
        container[k] = draw(st.sampled_from([0, v, 4 * v]) | between)
    for container, k in list(_slots(doc)):
        if isinstance(container, dict) and k in container and draw(st.integers(0, 9)) == 0:
            del container[k]
    return doc


def keys_of(*docs: Any) -> list[str]:
    return sorted({str(k) for d in docs for c, k in _slots(d) if isinstance(c, dict)}) or ["x"]


def long_integers(prefix: str, suffix: str) -> st.SearchStrategy[str]:
    """A decimal integer of 4,290 to 6,000 digits (Python's int/str limit is 4,300), signed or not, in ``prefix`` ...
    ``suffix``."""
    return st.tuples(st.sampled_from(["", "-"]), st.integers(4290, 6000)).map(
        lambda t: f"{prefix}{t[0]}1{'0' * t[1]}{suffix}")


def deep_text(opener: str = "[", closer: str = "]", prefix: str = "x: ", middle: str = "") -> st.SearchStrategy[str]:
    """Nesting 60 to 3000 deep: past every reader's depth limit, and past Python's recursion limit."""
    return st.integers(60, 3000).map(lambda n: prefix + opener * n + middle + closer * n)


# ---------------------------------------------------------------------- the check


def refuses_in_one_line(call: Callable[[], Any], errors: tuple[type[BaseException], ...]) -> BaseException | None:
    """Run ``call``: it returns, or raises one of ``errors`` whose text is one non-empty line; tracemalloc's peak
    stays under ``MEMORY_LIMIT``."""
    tracemalloc.start()
    caught = None
    try:
        call()
    except errors as e:
        caught = e
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    assert peak < MEMORY_LIMIT, f"peak {peak} bytes"
    if caught is not None:
        text = str(caught)
        assert text and "\n" not in text, repr(text)
    return caught


_TMP = tempfile.TemporaryDirectory(prefix="goodput-fuzz-")  # removed when the run ends


def in_file(content: Any, suffix: str = ".yaml") -> Path:
    """``content`` (text, bytes, or data dumped as YAML) in a fresh file, for readers that take a path."""
    d = Path(tempfile.mkdtemp(dir=_TMP.name))
    p = d / f"input{suffix}"
    if isinstance(content, bytes):
        p.write_bytes(content)
    elif isinstance(content, str):
        p.write_text(content, encoding="utf-8", errors="surrogatepass")
    else:
        p.write_text(yaml.safe_dump(content, allow_unicode=True), encoding="utf-8", errors="surrogatepass")
    return p


# ---------------------------------------------------------------------- the YAML and JSON readers themselves

YAML_SAMPLES = [p.read_text() for p in (REPO / "examples" / "fleet.yaml", REPO / "rules" / "slos.yaml",
                                         FIX / "regression_fleet.yaml")]


@st.composite
def text_mutations(draw: st.DrawFn, samples: list[str]) -> str:
    text = draw(st.sampled_from(samples))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(text)))
        piece = draw(st.sampled_from(["[", "{", "]", "}", ":", "- ", "&a ", "*a", "!!python/object:os.system ", "\t",
                                      "\n", '"', "'", "%", "@", "\x00", "\ufeff"]) | st.text(max_size=5))
        cut = draw(st.integers(0, 3))
        text = text[:i] + piece + text[i + cut:]
    return text


@FUZZ
@given(st.one_of(st.text(max_size=200), text_mutations(YAML_SAMPLES), deep_text(), deep_text("{a: ", "}"),
                 long_integers("x: ", "")))
def test_the_yaml_loader(text):
    path = in_file(text)
    refuses_in_one_line(lambda: load_yaml(path), (ConfigError,))


@FUZZ
@given(st.one_of(st.binary(max_size=200), deep_text("[", "]", "").map(str.encode),
                 deep_text('{"a":', "}", "", "1").map(str.encode),
                 st.sampled_from([b'"\\"[[[', b"[1,", b"\xff\xfe", b"NaN", b"1e400"]),
                 long_integers('{"a": [1, ', "]}").map(str.encode)))
def test_the_json_reader(data):
    refuses_in_one_line(lambda: parse_json(data, "fuzz"), (ConfigError,))


# ---------------------------------------------------------------------- file readers

FLEETS = [_yaml(REPO / "examples" / "fleet.yaml"), _yaml(FIX / "regression_fleet.yaml")]
FLEET_KEYS = keys_of(*FLEETS)


@FUZZ
@given(st.one_of(mutated(FLEETS[0], FLEET_KEYS), mutated(FLEETS[1], FLEET_KEYS), trees(FLEET_KEYS)))
def test_fleet_files(doc):
    refuses_in_one_line(lambda: parse_fleet(doc, "fleet.yaml"), (ConfigError,))


def _replayable(doc: dict) -> dict:
    """``doc`` with every workload at one request a second: the replay of an accepted file stays short."""
    for w in doc.get("workloads", []):
        w["arrival"] = {"process": "poisson", "rate": 1}
    return doc


def refused_or_replayed(doc: Any, source: str) -> None:
    """``parse_fleet`` refuses ``doc`` in one line naming ``source`` (and a key), or a few seconds of it replay in
    virtual time without raising."""
    fleet: list[Any] = []
    e = refuses_in_one_line(lambda: fleet.append(parse_fleet(doc, source)), (ConfigError,))
    if e is not None:
        assert str(e).startswith(f"{source}: "), str(e)
        return
    simulate(fleet[0], 3.0, drain_s=30.0)


# the gateway (quotas, tiers, tenants, the overload ladder, fallbacks, the circuit breaker, retries) of two real
# fleets, mutated in place: the rest of the file stays valid, so the gateway's own checks are what is fuzzed
GATEWAYS = {name: _replayable(_yaml(REPO / "examples" / name)) for name in ("overload.yaml", "primary_down.yaml")}
GATEWAY_KEYS = keys_of(*(f["gateway"] for f in GATEWAYS.values()))


@st.composite
def with_section(draw: st.DrawFn, fleet: dict, section: Callable[[dict], tuple[Any, Any]], keys: list[str]) -> dict:
    """``fleet`` with the section that ``section`` finds (its container and key) retuned, mutated, or replaced by a
    tree."""
    doc = copy.deepcopy(fleet)
    container, k = section(doc)
    how = draw(st.sampled_from(["retuned", "retuned", "mutated", "tree"]))  # half of them likely valid
    container[k] = draw({"retuned": retuned(container[k]), "mutated": mutated(container[k], keys),
                         "tree": trees(keys)}[how])
    return doc


@FUZZ_REPLAYS
@given(st.sampled_from(sorted(GATEWAYS)).flatmap(
    lambda name: with_section(GATEWAYS[name], lambda d: (d, "gateway"), GATEWAY_KEYS).map(lambda d: (name, d))))
def test_fleet_gateways(named):
    name, doc = named
    refused_or_replayed(doc, name)


# prefill/decode disaggregation: a fleet's deployment, and a demand file that `plan disagg` reads
DISAGG_FLEET = _replayable(_yaml(REPO / "examples" / "fleet_disagg.yaml"))
DISAGG_KEYS = keys_of(DISAGG_FLEET["deployments"][0])


@FUZZ_REPLAYS
@given(st.one_of(
    with_section(DISAGG_FLEET, lambda d: (d["deployments"][0], "disaggregation"), DISAGG_KEYS),
    with_section(DISAGG_FLEET, lambda d: (d["deployments"], 0), DISAGG_KEYS)))
def test_fleet_disaggregation(doc):
    refused_or_replayed(doc, "fleet_disagg.yaml")


DISAGG_DEMANDS = [_yaml(REPO / "examples" / n) for n in ("disagg_short.yaml", "disagg_long.yaml")]
DISAGG_DEMAND_KEYS = keys_of(*DISAGG_DEMANDS)
PRICES = load_prices()


@FUZZ
@given(st.one_of(*(retuned(d) for d in DISAGG_DEMANDS), *(mutated(d, DISAGG_DEMAND_KEYS) for d in DISAGG_DEMANDS),
                 trees(DISAGG_DEMAND_KEYS)))
def test_disaggregation_demand_files(doc):
    path = in_file(doc)
    e = refuses_in_one_line(lambda: load_disagg(path, PRICES), (ConfigError,))
    assert e is None or str(e).startswith(f"{path}: "), str(e)


DEMANDS = [_yaml(REPO / "examples" / "demand.yaml"), yaml.safe_load(CHAT_DEMAND)]
DEMAND_KEYS = keys_of(*DEMANDS)


@FUZZ
@given(st.one_of(mutated(DEMANDS[0], DEMAND_KEYS), mutated(DEMANDS[1], DEMAND_KEYS), trees(DEMAND_KEYS)))
def test_demand_files(doc):
    refuses_in_one_line(lambda: parse_demand(doc, "demand.yaml"), (ConfigError,))


_CHAT = DEMANDS[1]["deployments"]["chat"]
PLAN = {"deployments": {"chat": {"candidate": _CHAT["candidates"][0], "streams": _CHAT["streams"],
                                 "slos": DEMANDS[1]["slos"], "headroom": {"base": 3, "failure_domain": 1},
                                 "headroom_inputs": _CHAT["headroom"], "growth": 1.2, "desired_replicas": 4,
                                 "replica_goodput_tokens_per_second": 9000.0, "replica_concurrency_at_slo": 40.0}}}



EXPORTER_PLAN = _yaml(REPO / "examples" / "plan.yaml")



POLICY = {"deployments": {"chat": {"kind": "signals", "min_replicas": 2, "max_replicas": 8, "goodput_tokens_per_s": 9000.0,
                                   "queue_target_s": 0.5, "scale_up_replicas": 4, "warm_pool": 1}}}



RELEASES = {"releases": [{"time": "2026-11-23T10:00:00Z", "deployment": "chat", "kind": "model", "from": "a", "to": "b",
                          "note": "x"}, {"time": "2026-11-23T11:00:00Z", "deployment": "*", "kind": "config"}]}


@FUZZ
@given(st.one_of(mutated(RELEASES, keys_of(RELEASES)), trees(keys_of(RELEASES))),
       st.sampled_from([".yaml", ".csv"]))
def test_releases_files(doc, suffix):
    if suffix == ".csv":
        rows = doc.get("releases") if isinstance(doc, dict) else doc
        rows = rows if isinstance(rows, list) else [rows]
        head = "time,deployment,kind,from,to,note\n"
        doc = head + "".join(",".join(str(v) for v in (r.values() if isinstance(r, dict) else [r])) + "\n"
                             for r in rows)
    path = in_file(doc, suffix)
    refuses_in_one_line(lambda: load_releases(path), (ConfigError,))


SPEC = _yaml(REPO / "rules" / "slos.yaml")



TARGETS = {"targets": [{"deployment": "chat", "replica": "chat-0", "url": "http://127.0.0.1:9/metrics"},
                       {"deployment": "chat", "replica": "chat-1", "url": "http://127.0.0.1:10/metrics",
                        "engine": "vllm", "model": "m"}]}



# the readers that take a YAML file, each with a real input to mutate
YAML_FILES = {"plan replicas' plan": (load_plan_file, PLAN), "the engine exporter's plan": (load_plan, EXPORTER_PLAN),
              "policy": (load_policy_file, POLICY), "rules spec": (load_spec, SPEC), "targets": (load_targets, TARGETS)}


@pytest.mark.parametrize("reader", sorted(YAML_FILES))
@FUZZ
@given(data=st.data())
def test_yaml_files(reader, data):
    load, original = YAML_FILES[reader]
    doc = data.draw(st.one_of(mutated(original, keys_of(original)), trees(keys_of(original))))
    path = in_file(doc)
    refuses_in_one_line(lambda: load(path), (ConfigError,))


# ---------------------------------------------------------------------- load-test imports

IMPORTS = {p.name: json.loads(p.read_text()) for p in (FIX / "loadtest").glob("*.json")}
IMPORT_KEYS = keys_of(*IMPORTS.values())
SLO = parse_slo("ttft_p95=1s,tpot_p95=50ms")


@pytest.fixture(scope="module")
def imported_once(tmp_path_factory):
    """One real import first, so the modules it loads on first use (the report, Parquet) are not counted as the
    memory of a fuzzed input."""
    out = tmp_path_factory.mktemp("warm")
    import_run(FIX / "loadtest" / "vllm_bench_serve_detailed.json", out / "run", SLO)


@FUZZ
@given(st.one_of(*(mutated(doc, IMPORT_KEYS) for doc in IMPORTS.values()), trees(IMPORT_KEYS)))
def test_load_test_imports(imported_once, doc):
    path = in_file(json.dumps(doc), ".json")
    refuses_in_one_line(lambda: import_run(path, path.parent / "run", SLO), (ConfigError,))


def _jsonl(path: Path) -> list:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


IP_DIR = FIX / "loadtest" / "inference_perf_0.7.0"
# inference-perf's report directory, its per-request file cut to its first 4 requests and their first 6 chunk times
IP_FILES: dict[str, Any] = {p.name: (_yaml(p) if p.suffix == ".yaml" else json.loads(p.read_text()))
                            for p in sorted(IP_DIR.iterdir())}
IP_FILES["per_request_lifecycle_metrics.json"] = [
    {**r, "info": {**r["info"], "response_metrics": {**r["info"]["response_metrics"], "chunk_times": r["info"][
        "response_metrics"]["chunk_times"][:6]}}} for r in IP_FILES["per_request_lifecycle_metrics.json"][:4]]
# the formats the JSON files above do not cover: (the original, how it is written, the file's name)
IMPORT_FORMATS: dict[str, tuple[Any, Callable[[Any], str], str]] = {
    "aiperf-records": (_jsonl(FIX / "loadtest" / "aiperf_profile_export.jsonl"),
                       lambda d: "\n".join(json.dumps(x) for x in (d if isinstance(d, list) else [d])) + "\n",
                       "profile_export.jsonl"),
    "llmd-v0.2-yaml": (_yaml(FIX / "loadtest" / "llmd_br_v0_2_example.yaml"),
                       lambda d: yaml.safe_dump(d, allow_unicode=True), "report.yaml"),
}
AIPERF_CSV = (FIX / "loadtest" / "aiperf_profile_export_aiperf.csv").read_text()


@pytest.mark.parametrize("fmt", sorted(IMPORT_FORMATS))
@FUZZ
@given(data=st.data())
def test_load_test_import_formats(imported_once, fmt, data):
    original, write, name = IMPORT_FORMATS[fmt]
    keys = keys_of(original)
    doc = data.draw(st.one_of(retuned(original), mutated(original, keys), trees(keys)))
    path = in_file(write(doc)).rename(Path(tempfile.mkdtemp(dir=_TMP.name)) / name)
    refuses_in_one_line(lambda: import_run(path, path.parent / "run", SLO), (ConfigError,))


@FUZZ
@given(text_mutations([AIPERF_CSV]))
def test_load_test_import_aiperf_csv(imported_once, text):
    path = in_file(text, ".csv")
    refuses_in_one_line(lambda: import_run(path, path.parent / "run", SLO), (ConfigError,))


@FUZZ
@given(data=st.data())
def test_load_test_import_inference_perf_directory(imported_once, data):
    name = data.draw(st.sampled_from(sorted(IP_FILES)))
    original = IP_FILES[name]
    doc = data.draw(st.one_of(retuned(original), mutated(original, keys_of(original)), trees(keys_of(original))))
    d = Path(tempfile.mkdtemp(dir=_TMP.name)) / "report"
    d.mkdir()
    for f, content in {**IP_FILES, name: doc}.items():
        (d / f).write_text(yaml.safe_dump(content) if f.endswith(".yaml") else json.dumps(content))
    refuses_in_one_line(lambda: import_run(d, d.parent / "run", SLO), (ConfigError,))


# ---------------------------------------------------------------------- OTLP bodies

OTLP = json.loads((FIX / "otlp" / "otlp_proto_examples_trace.json").read_text())


def _protobuf(doc: dict) -> bytes:
    from google.protobuf import json_format
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    return json_format.ParseDict(doc, ExportTraceServiceRequest()).SerializeToString()


PB = _protobuf(OTLP)


@FUZZ
@given(st.one_of(mutated(OTLP, keys_of(OTLP)).map(lambda d: json.dumps(d).encode()), st.binary(max_size=300),
                 deep_text('{"resourceSpans": [', "]}", "").map(str.encode),
                 long_integers('{"resourceSpans": [{"resource": {"attributes": [{"key": "n", "value": {"intValue": ',
                               "}}]}}]}").map(str.encode)))
def test_otlp_json_bodies(body):
    refuses_in_one_line(lambda: decode_json(body), (OtlpError,))


@FUZZ
@given(st.lists(st.tuples(st.integers(0, len(PB) - 1), st.integers(0, 255)), min_size=1, max_size=6),
       st.integers(0, len(PB)))
def test_otlp_protobuf_bodies(flips, cut):
    body = bytearray(PB)
    for i, b in flips:
        body[i] = b
    refuses_in_one_line(lambda: decode_protobuf(bytes(body[:cut] if cut % 3 == 0 else body)), (OtlpError,))


_RECEIVER: list[Any] = []  # one receiver over one store for the whole run: a store per example would dominate


def _receiver() -> Any:
    from goodput.exporters.requests import RequestMetrics, TraceReceiver
    from goodput.exporters.trace_store import TraceStore

    if not _RECEIVER:
        _RECEIVER.append(TraceReceiver(RequestMetrics(), TraceStore(Path(_TMP.name) / "store",
                                                                     flush_interval_s=3600).start()))
    return _RECEIVER[0]


@FUZZ
@given(st.one_of(mutated(OTLP, keys_of(OTLP)).map(lambda d: json.dumps(d).encode()), st.binary(max_size=300),
                 long_integers('{"resourceSpans": ', "}").map(str.encode), st.just(PB)),
       st.sampled_from(["application/json", "application/x-protobuf", ""]), st.sampled_from(["", "gzip", "br"]))
def test_the_otlp_receiver_answers_4xx_in_one_line_never_500(body, content_type, encoding):
    status, _, answer, _ = _receiver().handle(content_type, encoding, body)
    assert status in (200, 400, 413, 415), (status, answer)
    if status != 200:
        error = json.loads(answer)["error"]
        assert error and "\n" not in error


# ---------------------------------------------------------------------- Prometheus answers

ANSWER = {"status": "success", "data": {"resultType": "matrix", "result": [
    {"metric": {"deployment": "chat"}, "values": [[60.0, "1"], [120.0, "NaN"]]}]}}


@FUZZ
@given(st.one_of(mutated(ANSWER, keys_of(ANSWER)).map(lambda d: json.dumps(d).encode()), st.binary(max_size=200),
                 deep_text("[", "]", "").map(str.encode)),
       st.sampled_from([200, 400, 422, 500, 503]))
def test_prometheus_answers(body, status):
    refuses_in_one_line(lambda: parse_answer("http://p", "k", read_json("http://p", "k", status, body)), (PromError,))


# ---------------------------------------------------------------------- the fleet's OpenAI API

OPENAI = {"model": "m", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 16, "stream": True,
          "stream_options": {"include_usage": True}, "temperature": 0.7}


@FUZZ
@given(st.one_of(mutated(OPENAI, keys_of(OPENAI)).map(lambda d: json.dumps(d).encode()), st.binary(max_size=200),
                 deep_text('{"messages": ', "}", "", "1").map(str.encode),
                 long_integers('{"max_tokens": ', "}").map(str.encode)),
       st.sampled_from([CHAT, COMPLETIONS]))
def test_openai_request_bodies(raw, path):
    e = refuses_in_one_line(lambda: validate(path, parse_body(raw), "m", 4096), (ApiError,))
    assert e is None or 400 <= e.status < 500, (e.status, str(e))


def test_an_openai_body_with_an_integer_past_pythons_limit_is_a_400():
    """Before, a ValueError: the live fleet's 500, with a traceback in its log."""
    with pytest.raises(ApiError) as e:
        validate(CHAT, parse_body(b'{"max_tokens": 1' + b"0" * 5000 + b"}"), "m", 4096)
    assert e.value.status == 400 and "4,300 digits" in str(e.value), str(e.value)


@pytest.mark.parametrize("depth", [100, 5000])
def test_a_nested_openai_body_is_a_400(depth):
    """Found by the fuzz suite: a body nested 5000 deep was a RecursionError, the fleet's 500."""
    with pytest.raises(ApiError) as e:
        validate(CHAT, parse_body(b'{"messages": ' + b"[" * depth + b"]" * depth + b"}"), "m", 4096)
    assert e.value.status == 400


# ---------------------------------------------------------------------- the ClickHouse sink's failure paths

# how an insert goes on tests/exporters/test_clickhouse_store.py's FakeClickHouse (its docstring says each): it lies
# (a 200 that stored nothing), stalls, streams, trickles, resets, or stores and then drops or stalls the reply
SERVER_ACTS = ["ok", "500", "exception", "short", "proxy", "stream", "trickle", "reset", "lost", "stall", "late"]
# each step: a batch of spans accepted (0 to 6), the server's next acts, then a flush or a stop and start (SIGTERM)
SINK_STEPS = st.tuples(st.integers(0, 6), st.lists(st.sampled_from(SERVER_ACTS), min_size=1, max_size=3),
                       st.sampled_from(["flush", "flush", "restart"]))


@settings(FUZZ, max_examples=15, deadline=timedelta(seconds=60))
@given(st.lists(SINK_STEPS, min_size=1, max_size=5))
def test_the_clickhouse_sink_stores_each_acknowledged_span_once(chdb, steps):
    """Batches the store acknowledged, flushes and restarts on the same write-ahead log against a server that fails in
    the drawn ways, then a healthy server and one more restart: every acknowledged span is in the table once."""
    from goodput.exporters.clickhouse_sink import MAX_REPLY_BYTES
    from tests.exporters.test_clickhouse_store import FakeClickHouse, _doc, _exactly_once, _spans, _store

    wal = Path(tempfile.mkdtemp(dir=_TMP.name))
    ch = FakeClickHouse(chdb, stall_s=0.6, stream_mb=MAX_REPLY_BYTES // (1 << 20) * 2)
    acknowledged: list = []
    try:
        store = _store(wal, ch, timeout_s=0.3)
        for i, (n, acts, then) in enumerate(steps):
            spans = _spans("acme", n, seed=i)
            store.accept(spans, _doc(spans), "J")
            acknowledged += spans
            ch.script = list(acts)
            if then == "flush":
                store.flush()
            else:  # a stop while the server misbehaves, what is owed left in the log, and a start on it
                store.close(within_s=1.0)
                store = _store(wal, ch, timeout_s=0.3)
        ch.script = []
        store.close(within_s=5.0)
        _store(wal, ch, timeout_s=5.0).close(within_s=5.0)
        _exactly_once(ch, acknowledged)
    finally:
        ch.close()
