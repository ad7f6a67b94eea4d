-- Staging for one ingest run. Spans are split on arrival into what normalization needs: engine spans
-- (`llm.request`, `llm_request`, at any depth) with their attributes already extracted, goodput's segment
-- spans folded per parent, and every other span as context (its place in the trace, its kind and times,
-- and the few attributes a request may inherit) — so no copy of every span's attribute map is ever held.
CREATE OR REPLACE TEMP TABLE staged_engine (
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR, kind TINYINT,
    start_time_unix_nano BIGINT, end_time_unix_nano BIGINT, status_code TINYINT, source VARCHAR, deployment VARCHAR,
    request_id VARCHAR, model VARCHAR, replica VARCHAR, tenant VARCHAR, tier VARCHAR, route VARCHAR, scene VARCHAR,
    a_input VARCHAR, a_output VARCHAR, a_cached VARCHAR, a_preemptions VARCHAR, a_outcome VARCHAR,
    finish_reason VARCHAR, reject_reason VARCHAR, degraded VARCHAR, fallback_from VARCHAR, fallback_reason VARCHAR,
    l_queue VARCHAR, l_prefill VARCHAR, l_decode VARCHAR, l_e2e VARCHAR, l_ttft VARCHAR
);
CREATE OR REPLACE TEMP TABLE staged_kids AS FROM in_flight LIMIT 0;   -- segment spans, folded per (trace, parent)
CREATE OR REPLACE TEMP TABLE staged_context (
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, kind TINYINT, start_ns BIGINT, end_ns BIGINT,
    source VARCHAR, tenant VARCHAR, tier VARCHAR, route VARCHAR, scene VARCHAR, model VARCHAR, a_input VARCHAR,
    a_output VARCHAR
);
