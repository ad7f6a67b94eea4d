"""The Collector's otel_traces table, made from its own DDL on ClickHouse's engine (chDB), filled with decoded OTLP
spans as the Collector's clickhouseexporter writes them."""

import hashlib
import json

import pytest

from goodput.exporters.otel_traces import (
    TableSpec,
    attribute_text,
    create_table,
    create_table_sql,
    insert_spans,
    span_row,
    ttl_expression,
)
from goodput.exporters.otlp import decode_json
from tests.conftest import REPO

VENDORED_SHA256 = "7c34aff65ca968057a99ec9a3f786426fadf3102d3257acce3bf6ff67be3df2b"


def _payload(attrs: list, kind: int = 2, status: int = 1, parent: str = "") -> str:
    span = {"traceId": "0af7651916cd43dd8448eb211c80319c", "spanId": "b7ad6b7169203331", "parentSpanId": parent,
            "name": "llm_request", "kind": kind, "startTimeUnixNano": "1700000000123456789",
            "endTimeUnixNano": "1700000002623456790", "attributes": attrs, "status": {"code": status, "message": "m"}}
    res = {"attributes": [{"key": "service.name", "value": {"stringValue": "chat"}},
                          {"key": "service.instance.id", "value": {"stringValue": "chat-0"}}]}
    return json.dumps({"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": [span]}]}]})


def test_the_vendored_ddl_is_the_collectors_byte_for_byte_and_its_sources_say_so():
    path = REPO / "goodput" / "exporters" / "sql" / "traces_table.sql"
    assert hashlib.sha256(path.read_bytes()).hexdigest() == VENDORED_SHA256
    sources = (REPO / "goodput" / "exporters" / "sql" / "SOURCES.md").read_text()
    assert VENDORED_SHA256 in sources and "Apache-2.0" in sources and "clickhouseexporter" in sources


def test_the_ddl_is_rendered_as_the_exporter_renders_it():
    text = create_table_sql(TableSpec("ob`s", "spans", "ReplicatedMergeTree('/t/{shard}', '{replica}')", 3 * 86400,
                                      "main"))
    assert "CREATE TABLE IF NOT EXISTS `ob\\`s`.`spans` ON CLUSTER `main` (" in text
    assert "ENGINE = ReplicatedMergeTree('/t/{shard}', '{replica}')" in text
    assert "TTL toDateTime(Timestamp) + toIntervalDay(3)" in text
    assert "bloom_filter(0.001)" in text and "tokenizer" not in text and "{{" not in text
    assert "TTL" not in create_table_sql()
    assert [ttl_expression(s) for s in (0, 7200, 90, 61)] == [
        "", "TTL toDateTime(Timestamp) + toIntervalHour(2)", "TTL toDateTime(Timestamp) + toIntervalSecond(90)",
        "TTL toDateTime(Timestamp) + toIntervalSecond(61)"]


def test_attribute_values_are_written_as_pdata_AsString_writes_them():
    assert [attribute_text(v) for v in ("x", True, False, 42, 1.0, 0.5, 1e21, 2.5e-7, None, [1, "a"], {"k": 1})] == [
        "x", "true", "false", "42", "1", "0.5", "1000000000000000000000", "0.00000025", "", '[1,"a"]', '{"k":1}']
    assert attribute_text(float("inf")) == "+Inf" and attribute_text(float("nan")) == "NaN"


def test_a_span_becomes_the_exporters_row():
    span, = decode_json(_payload([{"key": "gen_ai.usage.prompt_tokens", "value": {"intValue": "7"}},
                                  {"key": "gen_ai.latency.e2e", "value": {"doubleValue": 2.5}}], status=2))
    row = span_row(span)
    assert row["Timestamp"] == 1700000000123456789 and row["Duration"] == 2500000001
    assert (row["SpanKind"], row["StatusCode"], row["StatusMessage"]) == ("Server", "Error", "m")
    assert row["ServiceName"] == "chat" and row["ResourceAttributes"]["service.instance.id"] == "chat-0"
    assert row["SpanAttributes"] == {"gen_ai.usage.prompt_tokens": "7", "gen_ai.latency.e2e": "2.5"}
    assert row["ParentSpanId"] == "" and row["EventsName"] == [] and row["LinksAttributes"] == []
    internal, = decode_json(_payload([], kind=1, status=0, parent="00f067aa0ba902b7"))
    assert (span_row(internal)["SpanKind"], span_row(internal)["StatusCode"]) == ("Internal", "Unset")


def test_spans_are_inserted_into_a_table_made_by_the_collectors_ddl(chdb):
    spec = TableSpec(database="otel_rows", ttl_s=7300 * 86400)  # the spans are from 2023: a shorter TTL drops them
    create_table(chdb, spec)
    create_table(chdb, spec)  # IF NOT EXISTS, as at every Collector start
    spans = decode_json(_payload([{"key": "llm.tenant", "value": {"stringValue": "it's\ta\nb\\c"}}])) * 3
    assert insert_spans(chdb, spans, spec, batch=2) == 3
    got = chdb.query_df("SELECT toUnixTimestamp64Nano(Timestamp) AS ts, Duration, SpanKind, StatusCode, "
                        "SpanAttributes['llm.tenant'] AS tenant, ResourceAttributes['service.name'] AS svc, "
                        "length(Events.Name) AS events FROM otel_rows.otel_traces")
    assert len(got) == 3
    assert got["ts"].tolist() == [1700000000123456789] * 3 and got["Duration"].tolist() == [2500000001] * 3
    assert set(got["tenant"]) == {"it's\ta\nb\\c"} and set(got["svc"]) == {"chat"}
    assert set(got["SpanKind"]) == {"Server"} and set(got["StatusCode"]) == {"Ok"} and set(got["events"]) == {0}
    ttl = chdb.query_df("SELECT create_table_query AS q FROM system.tables "
                        "WHERE database = 'otel_rows' AND name = 'otel_traces'")["q"][0]
    assert "toIntervalDay(7300)" in ttl


@pytest.mark.parametrize("value", ["x'); DROP TABLE t; --", "{rows:String}"])
def test_values_are_bound_not_formatted_in(chdb, value):
    spec = TableSpec(database="otel_bound")
    create_table(chdb, spec)
    span, = decode_json(_payload([{"key": "k", "value": {"stringValue": value}}]))
    insert_spans(chdb, [span], spec)
    got = chdb.query_df("SELECT SpanAttributes['k'] AS v FROM otel_bound.otel_traces WHERE SpanAttributes['k'] = {v:String}",
                        {"v": value})
    assert got["v"].tolist() == [value]
