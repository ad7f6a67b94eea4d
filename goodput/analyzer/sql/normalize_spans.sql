-- Staged spans -> requests and segments (docs/analyzer.md, "Ingest"). Every engine span (`llm.request`,
-- goodput's; `llm_request`, vLLM's) at any depth is one engine call, and each call is one request. What a
-- request inherits (tenant, tier, route, scene, model, tokens) comes from the nearest span that carries it:
-- the call itself, then its ancestors nearest first, then (tenant, tier, route, scene only) any span of the
-- trace. Its gateway and send time come from the nearest enclosing SERVER span: the time before the call
-- started and after it ended; several calls under one server span (retries, fallbacks) share it out, each
-- owning the time since the previous call ended, the last one also the time after it. Idempotent: a request
-- (trace id, request id) already in `requests` is skipped. `engine` holds the staged engine spans,
-- de-duplicated on (trace id, span id) by the caller when needed.
INSERT INTO staged_kids SELECT * FROM in_flight;   -- early spans of earlier runs meet their root here
DELETE FROM in_flight;

CREATE OR REPLACE TEMP TABLE kids AS
SELECT trace_id, parent_span_id AS span_id, any_value(source) AS source, sum(spans) AS spans,
    min(gateway_start) AS gateway_start, max(gateway_end) AS gateway_end,
    min(queue_start) AS queue_start, max(queue_end) AS queue_end,
    min(prefill_start) AS prefill_start, max(prefill_end) AS prefill_end,
    min(decode_start) AS decode_start, max(decode_end) AS decode_end,
    min(send_start) AS send_start, max(send_end) AS send_end,
    any_value(deployment) AS deployment, any_value(model) AS model, any_value(tenant) AS tenant,
    any_value(tier) AS tier, any_value(route) AS route, any_value(request_id) AS request_id,
    min(kv_transfer_start) AS kv_transfer_start, max(kv_transfer_end) AS kv_transfer_end,
    any_value(prefill_replica) AS prefill_replica
FROM staged_kids
GROUP BY trace_id, parent_span_id;

INSERT INTO admission_spans
SELECT deployment, min(gateway_end) FROM kids
WHERE deployment IS NOT NULL AND deployment NOT IN (SELECT deployment FROM admission_spans) GROUP BY deployment;

-- segment spans without their root: only early ones (gateway, queue) that name their deployment are a request
-- in flight, kept until the root comes (unless that request is already known: the same spans ingested again)
CREATE OR REPLACE TEMP TABLE rootless AS
SELECT *, prefill_start IS NULL AND kv_transfer_start IS NULL AND decode_start IS NULL AND send_start IS NULL
          AND gateway_start IS NOT NULL AND deployment IS NOT NULL AS early
FROM kids k
WHERE NOT EXISTS (SELECT 1 FROM engine e WHERE e.trace_id = k.trace_id AND e.span_id = k.span_id AND e.name = 'llm.request');

INSERT INTO in_flight BY NAME
SELECT * EXCLUDE (span_id, early), span_id AS parent_span_id FROM rootless r
WHERE early AND NOT EXISTS (SELECT 1 FROM requests q WHERE q.trace_id = r.trace_id AND q.request_id = r.request_id);

-- what cannot be used, and why
INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT source, trace_id, nullif(span_id, ''), 'partial trace: segment spans without their llm.request span',
       spans::VARCHAR || ' span(s)'
FROM rootless WHERE NOT early;
DROP TABLE rootless;

INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT source, trace_id, span_id,
       CASE WHEN end_time_unix_nano < start_time_unix_nano THEN 'engine span ends before it starts'
            WHEN start_time_unix_nano <= 0 THEN 'engine span has no start time'
            ELSE 'engine span has no deployment (llm.deployment or the service name)' END,
       name
FROM engine
WHERE end_time_unix_nano < start_time_unix_nano OR start_time_unix_nano <= 0 OR deployment IS NULL;

-- usable calls; with `--span-format both` the fleet shows each request twice (llm.request and llm_request,
-- one request id): the llm.request, with its segment spans, is kept
CREATE OR REPLACE TEMP TABLE usable AS
SELECT * FROM engine
WHERE end_time_unix_nano >= start_time_unix_nano AND start_time_unix_nano > 0 AND deployment IS NOT NULL;

CREATE OR REPLACE TEMP TABLE calls AS
SELECT * FROM usable u
WHERE NOT (u.name = 'llm_request' AND EXISTS (
    SELECT 1 FROM usable g WHERE g.trace_id = u.trace_id AND g.request_id = u.request_id AND g.name = 'llm.request'));

CREATE OR REPLACE TEMP TABLE ignored AS
SELECT 'vLLM llm_request span of a request also seen as llm.request (--span-format both)' AS reason,
       (SELECT count(*) FROM usable) - (SELECT count(*) FROM calls) AS spans
UNION ALL
SELECT 'context: spans of other services in a request''s trace',
       count(*) FILTER (WHERE trace_id IN (SELECT trace_id FROM engine))
FROM (SELECT DISTINCT trace_id, span_id FROM staged_context)
UNION ALL
SELECT 'no LLM request in the trace (no llm.request or llm_request span)',
       count(*) FILTER (WHERE trace_id NOT IN (SELECT trace_id FROM engine))
FROM (SELECT DISTINCT trace_id, span_id FROM staged_context);

-- the context of the traces that hold calls: every span's place, kind, times and inheritable attributes (a
-- trace of lone root calls, the simulator's, has none to look at)
CREATE OR REPLACE TEMP TABLE nodes AS
SELECT DISTINCT ON (trace_id, span_id) * FROM (
    SELECT trace_id, span_id, parent_span_id, kind, start_time_unix_nano AS start_ns, end_time_unix_nano AS end_ns,
           tenant, tier, route, scene, model, a_input, a_output
    FROM usable
    WHERE trace_id IN (SELECT trace_id FROM staged_context) OR trace_id IN (SELECT trace_id FROM usable WHERE parent_span_id <> '')
    UNION ALL
    SELECT trace_id, span_id, parent_span_id, kind, start_ns, end_ns, tenant, tier, route, scene, model, a_input,
           a_output
    FROM staged_context WHERE trace_id IN (SELECT trace_id FROM calls)
);
DROP TABLE engine;
DROP TABLE usable;
DROP TABLE staged_context;   -- tables are dropped once used: peak memory

CREATE OR REPLACE TEMP TABLE lineage AS
WITH RECURSIVE up(trace_id, call, span_id, parent_span_id, depth) AS (
    SELECT n.trace_id, c.span_id, n.span_id, n.parent_span_id, 1
    FROM calls c JOIN nodes n ON n.trace_id = c.trace_id AND n.span_id = c.parent_span_id
    WHERE c.parent_span_id <> ''
    UNION ALL
    SELECT n.trace_id, u.call, n.span_id, n.parent_span_id, u.depth + 1
    FROM up u JOIN nodes n ON n.trace_id = u.trace_id AND n.span_id = u.parent_span_id
    WHERE u.parent_span_id <> '' AND u.depth < 64            -- a cycle of parent ids ends here
)
SELECT u.trace_id, u.call AS span_id,
    arg_min(n.tenant, u.depth) FILTER (WHERE n.tenant IS NOT NULL) AS tenant,
    arg_min(n.tier, u.depth) FILTER (WHERE n.tier IS NOT NULL) AS tier,
    arg_min(n.route, u.depth) FILTER (WHERE n.route IS NOT NULL) AS route,
    arg_min(n.scene, u.depth) FILTER (WHERE n.scene IS NOT NULL) AS scene,
    arg_min(n.model, u.depth) FILTER (WHERE n.model IS NOT NULL) AS model,
    arg_min(n.a_input, u.depth) FILTER (WHERE n.a_input IS NOT NULL) AS a_input,
    arg_min(n.a_output, u.depth) FILTER (WHERE n.a_output IS NOT NULL) AS a_output,
    arg_min(n.span_id, u.depth) FILTER (WHERE n.kind = 2) AS server_id,      -- OTLP SpanKind SERVER
    arg_min(n.start_ns, u.depth) FILTER (WHERE n.kind = 2) AS server_start,
    arg_min(n.end_ns, u.depth) FILTER (WHERE n.kind = 2) AS server_end
FROM up u JOIN nodes n USING (trace_id, span_id)
GROUP BY u.trace_id, u.call;

CREATE OR REPLACE TEMP TABLE trace_context AS
SELECT trace_id,
    arg_min(tenant, start_ns) FILTER (WHERE tenant IS NOT NULL) AS tenant,
    arg_min(tier, start_ns) FILTER (WHERE tier IS NOT NULL) AS tier,
    arg_min(route, start_ns) FILTER (WHERE route IS NOT NULL) AS route,
    arg_min(scene, start_ns) FILTER (WHERE scene IS NOT NULL) AS scene
FROM nodes GROUP BY trace_id;
DROP TABLE nodes;

CREATE OR REPLACE TEMP TABLE windows AS
WITH c AS (
    SELECT c.*, l.server_id, l.server_start, l.server_end,
        coalesce(c.tenant, l.tenant, t.tenant) AS w_tenant, coalesce(c.tier, l.tier, t.tier) AS w_tier,
        coalesce(c.route, l.route, t.route) AS w_route, coalesce(c.scene, l.scene, t.scene) AS w_scene,
        coalesce(c.model, l.model) AS w_model, coalesce(c.a_input, l.a_input) AS w_input,
        coalesce(c.a_output, l.a_output) AS w_output
    FROM calls c LEFT JOIN lineage l USING (trace_id, span_id) LEFT JOIN trace_context t USING (trace_id)
), ranked AS (   -- only traces with several calls need ranking (window functions are the costly part)
    SELECT trace_id, span_id,
        row_number() OVER (PARTITION BY trace_id ORDER BY start_time_unix_nano, span_id) - 1 AS retries,
        row_number() OVER (PARTITION BY trace_id, server_id ORDER BY start_time_unix_nano, span_id) = 1 AS first,
        row_number() OVER (PARTITION BY trace_id, server_id ORDER BY end_time_unix_nano DESC, span_id) = 1 AS last,
        max(end_time_unix_nano) OVER (PARTITION BY trace_id, server_id ORDER BY start_time_unix_nano, span_id
                                      ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM c
    WHERE trace_id IN (SELECT trace_id FROM calls GROUP BY trace_id HAVING count(*) > 1)
), w AS (
    SELECT c.*, coalesce(r.retries, 0) AS retries, coalesce(r.first, true) AS first, coalesce(r.last, true) AS last,
           r.prev_end
    FROM c LEFT JOIN ranked r USING (trace_id, span_id)
)
SELECT *,
    CASE WHEN server_id IS NULL THEN start_time_unix_nano WHEN first THEN server_start
         ELSE least(start_time_unix_nano, prev_end) END AS w_start,
    CASE WHEN server_id IS NULL OR NOT last THEN end_time_unix_nano ELSE server_end END AS w_end
FROM w;
DROP TABLE calls;
DROP TABLE lineage;
DROP TABLE trace_context;

CREATE OR REPLACE TEMP TABLE fresh AS
SELECT w.*, k.* EXCLUDE (trace_id, span_id, source, spans)
FROM windows w LEFT JOIN kids k ON k.trace_id = w.trace_id AND k.span_id = w.span_id AND w.name = 'llm.request'
WHERE NOT EXISTS (SELECT 1 FROM requests r WHERE r.trace_id = w.trace_id AND r.request_id = w.request_id);
CREATE OR REPLACE TEMP TABLE known AS   -- calls already in the database
SELECT (SELECT count(*) FROM windows) - (SELECT count(*) FROM fresh) AS calls;
DROP TABLE windows;
DROP TABLE kids;

CREATE OR REPLACE TEMP TABLE new_requests AS
WITH base AS (
    SELECT *,
        name = 'llm_request' AS vllm, server_id IS NOT NULL AS served,
        (end_time_unix_nano - start_time_unix_nano) / 1e9 AS span_s,
        (start_time_unix_nano - w_start) / 1e9 AS before_s,   -- gateway time outside the engine span
        (w_end - end_time_unix_nano) / 1e9 AS after_s         -- send time outside the engine span
    FROM fresh
), seg AS (
    SELECT *,
        CASE WHEN served THEN before_s + coalesce((gateway_end - gateway_start) / 1e9, 0)
             ELSE (gateway_end - gateway_start) / 1e9 END AS gateway_s,
        CASE WHEN vllm THEN TRY_CAST(l_queue AS DOUBLE) ELSE (queue_end - queue_start) / 1e9 END AS queue_s,
        CASE WHEN vllm THEN TRY_CAST(l_prefill AS DOUBLE) ELSE (prefill_end - prefill_start) / 1e9 END AS prefill_s,
        (kv_transfer_end - kv_transfer_start) / 1e9 AS kv_transfer_s,
        CASE WHEN vllm THEN TRY_CAST(l_decode AS DOUBLE) ELSE (decode_end - decode_start) / 1e9 END AS decode_s,
        CASE WHEN served THEN after_s + coalesce((send_end - send_start) / 1e9, 0)
             ELSE (send_end - send_start) / 1e9 END AS send_s,
        CASE WHEN served THEN (w_end - w_start) / 1e9
             WHEN vllm THEN coalesce(TRY_CAST(l_e2e AS DOUBLE), span_s) ELSE span_s END AS e2e_s,
        -- the first token: where decode starts (after the KV transfer, disaggregated), else where prefill ends
        before_s + CASE WHEN vllm THEN TRY_CAST(l_ttft AS DOUBLE)
                        WHEN decode_start IS NOT NULL THEN (CASE WHEN kv_transfer_end IS NOT NULL THEN decode_start
                                                                 ELSE prefill_end END - start_time_unix_nano) / 1e9
                        END AS ttft_s,
        TRY_CAST(w_output AS BIGINT) AS output_tokens
    FROM base
)
SELECT
    trace_id, request_id,
    make_timestamptz(w_start // 1000) AS ts, w_start AS start_ns, w_end AS end_ns,
    w_model AS model, deployment, replica, coalesce(w_tenant, 'unknown') AS tenant, coalesce(w_tier, 'unknown') AS tier,
    coalesce(w_route, 'unknown') AS route, w_scene AS scene,
    TRY_CAST(w_input AS BIGINT) AS input_tokens, output_tokens,
    TRY_CAST(a_cached AS BIGINT) AS cached_tokens, TRY_CAST(a_preemptions AS BIGINT) AS preemptions,
    coalesce(a_outcome, CASE WHEN status_code = 2 THEN 'error' WHEN finish_reason = 'abort' THEN 'cancelled'
                             ELSE 'ok' END) AS outcome,
    finish_reason, reject_reason,
    gateway_s, queue_s, prefill_s, decode_s, send_s,
    other_seconds(e2e_s, gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s) AS other_s,
    e2e_s, ttft_s,
    ttft_other_seconds(ttft_s, gateway_s, queue_s, prefill_s, kv_transfer_s) AS ttft_other_s,
    tpot_seconds(e2e_s, ttft_s, output_tokens) AS tpot_s,
    source, retries::INTEGER AS retries, degraded, fallback_from, fallback_reason, kv_transfer_s, prefill_replica,
    -- segment start times, for the long-form table only
    w_start AS x_gateway, queue_start AS x_queue, prefill_start AS x_prefill, kv_transfer_start AS x_kv_transfer,
    decode_start AS x_decode,
    CASE WHEN served THEN coalesce(send_start, end_time_unix_nano) ELSE send_start END AS x_send
FROM seg
ORDER BY w_start;
DROP TABLE fresh;

INSERT INTO requests BY NAME
SELECT * EXCLUDE (x_gateway, x_queue, x_prefill, x_kv_transfer, x_decode, x_send) FROM new_requests ORDER BY start_ns;

INSERT INTO segments BY NAME
SELECT trace_id, request_id, segment, start_ns, duration_s FROM (
    SELECT trace_id, request_id,
           unnest(['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other']) AS segment,
           unnest([x_gateway, x_queue, x_prefill, x_kv_transfer, x_decode, x_send, NULL]) AS start_ns,
           unnest([gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s, other_s]) AS duration_s
    FROM new_requests
) WHERE duration_s IS NOT NULL;
