-- The analyzer's tables. requests: one row per request, its segment durations in seconds as columns
-- (decomposition and percentiles read only these); segments: the same in long form with start times;
-- quarantine: records that could not be used, with the reason. Rows are inserted in arrival order, so
-- DuckDB's per-row-group min/max (zone maps) prune time filters without an index.
CREATE TABLE IF NOT EXISTS requests (
    trace_id VARCHAR NOT NULL,
    request_id VARCHAR,
    ts TIMESTAMPTZ NOT NULL,          -- arrival at the gateway (or the engine, for vLLM spans)
    start_ns BIGINT NOT NULL,
    end_ns BIGINT NOT NULL,
    model VARCHAR, deployment VARCHAR, replica VARCHAR, tenant VARCHAR, tier VARCHAR, route VARCHAR, scene VARCHAR,
    input_tokens BIGINT, output_tokens BIGINT, cached_tokens BIGINT, preemptions BIGINT,
    outcome VARCHAR, finish_reason VARCHAR, reject_reason VARCHAR,
    gateway_s DOUBLE, queue_s DOUBLE, prefill_s DOUBLE, decode_s DOUBLE, send_s DOUBLE,
    other_s DOUBLE,                   -- E2E minus the segments: gaps (> 0) or overlaps from clock skew (< 0)
    e2e_s DOUBLE, ttft_s DOUBLE,
    ttft_other_s DOUBLE,              -- TTFT minus gateway, queue and prefill
    tpot_s DOUBLE,                    -- (E2E - TTFT) / (output tokens - 1)
    source VARCHAR
);
-- The decomposition's arithmetic, once for every input format.
CREATE OR REPLACE MACRO other_seconds(e2e, gateway, queue, prefill, decode, send) AS
    e2e - (coalesce(gateway, 0) + coalesce(queue, 0) + coalesce(prefill, 0) + coalesce(decode, 0) + coalesce(send, 0));
CREATE OR REPLACE MACRO ttft_other_seconds(ttft, gateway, queue, prefill) AS
    ttft - (coalesce(gateway, 0) + coalesce(queue, 0) + coalesce(prefill, 0));
CREATE OR REPLACE MACRO tpot_seconds(e2e, ttft, output_tokens) AS   -- (E2E - TTFT) / (output tokens - 1)
    CASE WHEN output_tokens > 1 AND ttft IS NOT NULL THEN (e2e - ttft) / (output_tokens - 1) END;

CREATE TABLE IF NOT EXISTS segments (
    trace_id VARCHAR NOT NULL,
    segment VARCHAR NOT NULL,         -- gateway | queue | prefill | decode | send | other
    start_ns BIGINT,
    duration_s DOUBLE
);
CREATE TABLE IF NOT EXISTS quarantine (
    source VARCHAR, trace_id VARCHAR, span_id VARCHAR, reason VARCHAR, detail VARCHAR,
    noted_at TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE TABLE IF NOT EXISTS ingest_log (
    source VARCHAR, ingested_at TIMESTAMPTZ, spans BIGINT, requests BIGINT, duplicates BIGINT, quarantined BIGINT
);
