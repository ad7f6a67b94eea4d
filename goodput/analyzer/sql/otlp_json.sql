-- OTLP JSON documents, one per line ($path: the Collector's file exporter, the simulator's spans.otlp.jsonl), read
-- by DuckDB into the trace store's schema in one set-based pass: no Python per span (docs/analyzer.md, "Ingest").
-- The caller stages the rows only when every document is one the Python decoder (goodput.exporters.otlp.decode_json)
-- reads to the same values: its `shape` (json_structure, checked by goodput.analyzer.ingest) has only the fields
-- and JSON types that decoder accepts, it is not `suspect`, and every span is `ok`. Otherwise the file is decoded in
-- Python, which quarantines each bad record with its line and reason.

-- An OTLP attribute list as the trace store's map<string, string>, values as goodput.exporters.parquet_sink._text
-- writes them (an int as its decimal, a double as its shortest repr, true / false); a value this pass cannot read
-- (an intValue outside int64) is NULL, and otlp_map_ok says so. Duplicate keys make map_from_entries fail: the
-- caller then decodes in Python (where the last one wins).
CREATE OR REPLACE TEMP MACRO otlp_map(l) AS coalesce(map_from_entries(list_transform(l, lambda a: {k: a.key,
    v: coalesce(a.value.stringValue, CAST(TRY_CAST(a.value.intValue AS BIGINT) AS VARCHAR),
                CAST(a.value.doubleValue AS VARCHAR), CAST(a.value.boolValue AS VARCHAR))})), MAP {});
CREATE OR REPLACE TEMP MACRO otlp_map_ok(m) AS list_count(map_values(m)) = cardinality(m);

-- suspect: what json_structure does not show — a string that is not valid UTF-8 (an escaped lone surrogate), a
-- null (absent and null read alike here, not in Python), an intValue that is not plain decimal digits, a value of
-- a kind this pass does not read (where "JSON" hides it), a status that is not an object or its message no string
-- (the file is read twice, here and below, rather than held: its text is the largest thing in the pass; a line
-- over 64 MiB fails the read, and the caller decodes the file in Python)
SELECT count(*) FILTER (WHERE regexp_matches(json, '\\u[dD][89a-fA-F]|:\s*null|"(arrayValue|kvlistValue|bytesValue)"|'
        || '"intValue":\s*("[^"]*[^-0-9"]|-?[0-9]*[.eE])|"status":\s*[^{\s]|"message":\s*[^"\s]')),
    list(DISTINCT json_structure(json))
FROM read_json_objects($path, format = 'newline_delimited', maximum_object_size = 67108864);

CREATE OR REPLACE TEMP TABLE otlp_spans AS
WITH rs AS (
    SELECT unnest(json_transform(json, '{"resourceSpans": [{"resource": {"attributes": [{"key": "VARCHAR", "value":
        {"stringValue": "VARCHAR", "intValue": "VARCHAR", "doubleValue": "DOUBLE", "boolValue": "BOOLEAN"}}]},
        "scopeSpans": [{"spans": [{"traceId": "VARCHAR", "spanId": "VARCHAR", "parentSpanId": "VARCHAR",
        "name": "VARCHAR", "kind": "VARCHAR", "startTimeUnixNano": "VARCHAR", "endTimeUnixNano": "VARCHAR",
        "status": {"code": "VARCHAR", "message": "VARCHAR"}, "attributes": [{"key": "VARCHAR", "value":
        {"stringValue": "VARCHAR", "intValue": "VARCHAR", "doubleValue": "DOUBLE", "boolValue": "BOOLEAN"}}]}]}]}]}'
        ).resourceSpans) AS rs
    FROM read_json_objects($path, format = 'newline_delimited', maximum_object_size = 67108864)
), ss AS (
    SELECT otlp_map(rs.resource.attributes) AS res, unnest(rs.scopeSpans) AS ss FROM rs
), sp AS (
    SELECT res, s, otlp_map(s.attributes) AS attributes FROM (SELECT res, unnest(ss.spans) AS s FROM ss)
)
SELECT lower(s.traceId) AS trace_id, lower(s.spanId) AS span_id, lower(coalesce(s.parentSpanId, '')) AS parent_span_id,
    coalesce(s.name, '') AS name, TRY_CAST(coalesce(s.kind, '0') AS TINYINT) AS kind,
    TRY_CAST(s.startTimeUnixNano AS BIGINT) AS start_time_unix_nano, TRY_CAST(s.endTimeUnixNano AS BIGINT) AS end_time_unix_nano,
    TRY_CAST(coalesce(s.status.code, '0') AS TINYINT) AS status_code, coalesce(s.status.message, '') AS status_message,
    coalesce(res['service.name'], '') AS service_name, attributes, res AS resource,
    -- what decode_json checks: hex ids of 16 and 8 bytes, a kind 0-5, a status code 0-2, times in 0 .. 2^63-1
    coalesce(len(s.attributes), 0) = cardinality(attributes) AND otlp_map_ok(attributes) AND otlp_map_ok(res)
        AND regexp_full_match(coalesce(s.traceId, ''), '[0-9a-fA-F]{32}') AND regexp_full_match(coalesce(s.spanId, ''), '[0-9a-fA-F]{16}')
        AND regexp_full_match(coalesce(s.parentSpanId, ''), '([0-9a-fA-F]{16})?')
        AND regexp_full_match(coalesce(s.kind, '0'), '[0-5]') AND regexp_full_match(coalesce(s.status.code, '0'), '[0-2]')
        AND regexp_full_match(coalesce(s.startTimeUnixNano, ''), '[0-9]{1,19}') AND start_time_unix_nano IS NOT NULL
        AND regexp_full_match(coalesce(s.endTimeUnixNano, ''), '[0-9]{1,19}') AND end_time_unix_nano IS NOT NULL AS ok
FROM sp;
