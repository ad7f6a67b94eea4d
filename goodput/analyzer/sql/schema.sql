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
    ttft_other_s DOUBLE,              -- TTFT minus gateway, queue, prefill and KV transfer
    tpot_s DOUBLE,                    -- (E2E - TTFT) / (output tokens - 1)
    source VARCHAR,
    retries INTEGER,                  -- engine calls of the same trace before this one (retries, fallbacks)
    -- the gateway's overload ladder and fallback routes (llm.degraded, llm.fallback_from, llm.fallback_reason)
    degraded VARCHAR, fallback_from VARCHAR, fallback_reason VARCHAR,
    kv_transfer_s DOUBLE,             -- prefill -> decode replica KV-cache move (P/D disaggregation; NULL: none)
    prefill_replica VARCHAR           -- the replica that prefilled it, when that is not `replica` (the decode one)
);
-- databases made before the columns
ALTER TABLE requests ADD COLUMN IF NOT EXISTS retries INTEGER;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS degraded VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS fallback_from VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS fallback_reason VARCHAR;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS kv_transfer_s DOUBLE;
ALTER TABLE requests ADD COLUMN IF NOT EXISTS prefill_replica VARCHAR;
-- The decomposition's arithmetic, once for every input format.
CREATE OR REPLACE MACRO other_seconds(e2e, gateway, queue, prefill, kv_transfer, decode, send) AS
    e2e - (coalesce(gateway, 0) + coalesce(queue, 0) + coalesce(prefill, 0) + coalesce(kv_transfer, 0)
           + coalesce(decode, 0) + coalesce(send, 0));
CREATE OR REPLACE MACRO ttft_other_seconds(ttft, gateway, queue, prefill, kv_transfer) AS
    ttft - (coalesce(gateway, 0) + coalesce(queue, 0) + coalesce(prefill, 0) + coalesce(kv_transfer, 0));
CREATE OR REPLACE MACRO tpot_seconds(e2e, ttft, output_tokens) AS   -- (E2E - TTFT) / (output tokens - 1)
    CASE WHEN output_tokens > 1 AND ttft IS NOT NULL THEN (e2e - ttft) / (output_tokens - 1) END;

CREATE TABLE IF NOT EXISTS segments (
    trace_id VARCHAR NOT NULL,
    segment VARCHAR NOT NULL,         -- gateway | queue | prefill | kv_transfer | decode | send | other
    start_ns BIGINT,
    duration_s DOUBLE,
    request_id VARCHAR                -- a trace can hold several requests (retries)
);
ALTER TABLE segments ADD COLUMN IF NOT EXISTS request_id VARCHAR;
-- Where a span names its request's tenant, tier, route and scene, first key first (docs/analyzer.md).
CREATE OR REPLACE MACRO tenant_attr(a) AS
    coalesce(a['llm.tenant'], a['goodput.tenant'], a['tenant.id'], a['enduser.id']);
CREATE OR REPLACE MACRO tier_attr(a) AS coalesce(a['llm.tier'], a['goodput.tier']);
CREATE OR REPLACE MACRO route_attr(a) AS coalesce(a['llm.route'], a['goodput.route'], a['http.route']);
CREATE OR REPLACE MACRO scene_attr(a) AS coalesce(a['llm.scene'], a['goodput.scene']);
CREATE OR REPLACE MACRO model_attr(a) AS coalesce(a['gen_ai.request.model'], a['gen_ai.response.model']);
CREATE OR REPLACE MACRO input_attr(a) AS coalesce(a['gen_ai.usage.input_tokens'], a['gen_ai.usage.prompt_tokens']);
CREATE OR REPLACE MACRO output_attr(a) AS
    coalesce(a['gen_ai.usage.output_tokens'], a['gen_ai.usage.completion_tokens']);

CREATE TABLE IF NOT EXISTS quarantine (
    source VARCHAR, trace_id VARCHAR, span_id VARCHAR, reason VARCHAR, detail VARCHAR,
    noted_at TIMESTAMPTZ DEFAULT current_timestamp
);
CREATE TABLE IF NOT EXISTS ingest_log (
    source VARCHAR, ingested_at TIMESTAMPTZ, spans BIGINT, requests BIGINT, duplicates BIGINT, quarantined BIGINT
);
