-- Staged spans -> requests and segments. Roots are `llm.request` (goodput's span model) and vLLM's
-- `llm_request`; children are the back-to-back segment spans. Idempotent: a trace already in
-- `requests` is skipped. Traces that cannot be used go to quarantine with the reason.
-- `roots` holds the staged root spans, de-duplicated on (trace id, span id) by the caller when needed;
-- children were folded per trace while staging (duplicates only feed min / max).
CREATE OR REPLACE TEMP TABLE kids AS
SELECT trace_id,
    min(gateway_start) AS gateway_start, max(gateway_end) AS gateway_end,
    min(queue_start) AS queue_start, max(queue_end) AS queue_end,
    min(prefill_start) AS prefill_start, max(prefill_end) AS prefill_end,
    min(decode_start) AS decode_start, max(decode_end) AS decode_end,
    min(send_start) AS send_start, max(send_end) AS send_end
FROM staged_kids
GROUP BY trace_id;

-- what cannot be used, and why
INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT any_value(source), trace_id, NULL, 'partial trace: segment spans without an llm.request root',
       sum(spans)::VARCHAR || ' span(s)'
FROM staged_kids
WHERE trace_id NOT IN (SELECT trace_id FROM roots)
GROUP BY trace_id;

INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT DISTINCT source, trace_id, span_id, 'not an LLM request span (expected llm.request, its segments, or llm_request)', name
FROM staged_other;

INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT source, trace_id, span_id,
       CASE WHEN end_time_unix_nano < start_time_unix_nano THEN 'root span ends before it starts'
            WHEN start_time_unix_nano <= 0 THEN 'root span has no start time'
            ELSE 'root span has no deployment (llm.deployment or the service name)' END,
       name
FROM roots
WHERE end_time_unix_nano < start_time_unix_nano OR start_time_unix_nano <= 0 OR deployment IS NULL;

INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT any_value(source), trace_id, NULL, 'spans of this trace disagree about its root', count(*)::VARCHAR || ' roots'
FROM roots GROUP BY trace_id HAVING count(*) > 1;

CREATE OR REPLACE TEMP TABLE fresh AS
SELECT r.*, k.* EXCLUDE (trace_id)
FROM roots r LEFT JOIN kids k USING (trace_id)
WHERE r.end_time_unix_nano >= r.start_time_unix_nano AND r.start_time_unix_nano > 0 AND r.deployment IS NOT NULL
  AND r.trace_id NOT IN (SELECT trace_id FROM roots GROUP BY trace_id HAVING count(*) > 1)
  AND r.trace_id NOT IN (SELECT trace_id FROM requests);

CREATE OR REPLACE TEMP TABLE new_requests AS
WITH base AS (
    SELECT *,
        (end_time_unix_nano - start_time_unix_nano) / 1e9 AS span_s,
        name = 'llm_request' AS vllm
    FROM fresh
), seg AS (
    SELECT *,
        CASE WHEN vllm THEN NULL ELSE (gateway_end - gateway_start) / 1e9 END AS gateway_s,
        CASE WHEN vllm THEN TRY_CAST(l_queue AS DOUBLE) ELSE (queue_end - queue_start) / 1e9 END AS queue_s,
        CASE WHEN vllm THEN TRY_CAST(l_prefill AS DOUBLE) ELSE (prefill_end - prefill_start) / 1e9 END AS prefill_s,
        CASE WHEN vllm THEN TRY_CAST(l_decode AS DOUBLE) ELSE (decode_end - decode_start) / 1e9 END AS decode_s,
        CASE WHEN vllm THEN NULL ELSE (send_end - send_start) / 1e9 END AS send_s,
        CASE WHEN vllm THEN coalesce(TRY_CAST(l_e2e AS DOUBLE), span_s) ELSE span_s END AS e2e_s,
        CASE WHEN vllm THEN TRY_CAST(l_ttft AS DOUBLE)
             WHEN decode_start IS NOT NULL THEN (prefill_end - start_time_unix_nano) / 1e9 END AS ttft_s,
        TRY_CAST(a_output AS BIGINT) AS output_tokens
    FROM base
)
SELECT
    trace_id,
    coalesce(a_request_id, a_gen_ai_request_id, trace_id) AS request_id,
    make_timestamptz(start_time_unix_nano // 1000) AS ts,
    start_time_unix_nano AS start_ns, end_time_unix_nano AS end_ns,
    model, deployment, replica, coalesce(tenant, 'unknown') AS tenant, coalesce(tier, 'unknown') AS tier,
    coalesce(route, 'unknown') AS route, scene,
    TRY_CAST(a_input AS BIGINT) AS input_tokens,
    output_tokens,
    TRY_CAST(a_cached AS BIGINT) AS cached_tokens,
    TRY_CAST(a_preemptions AS BIGINT) AS preemptions,
    coalesce(a_outcome, CASE WHEN status_code = 2 THEN 'error' ELSE 'ok' END) AS outcome,
    finish_reason, reject_reason,
    gateway_s, queue_s, prefill_s, decode_s, send_s,
    other_seconds(e2e_s, gateway_s, queue_s, prefill_s, decode_s, send_s) AS other_s,
    e2e_s, ttft_s,
    ttft_other_seconds(ttft_s, gateway_s, queue_s, prefill_s) AS ttft_other_s,
    tpot_seconds(e2e_s, ttft_s, output_tokens) AS tpot_s,
    source
FROM seg
ORDER BY start_time_unix_nano;

INSERT INTO requests SELECT * FROM new_requests ORDER BY start_ns;

INSERT INTO segments
SELECT trace_id, 'gateway', gateway_start, (gateway_end - gateway_start) / 1e9 FROM fresh WHERE gateway_start IS NOT NULL
UNION ALL SELECT trace_id, 'queue', queue_start, (queue_end - queue_start) / 1e9 FROM fresh WHERE queue_start IS NOT NULL
UNION ALL SELECT trace_id, 'prefill', prefill_start, (prefill_end - prefill_start) / 1e9 FROM fresh WHERE prefill_start IS NOT NULL
UNION ALL SELECT trace_id, 'decode', decode_start, (decode_end - decode_start) / 1e9 FROM fresh WHERE decode_start IS NOT NULL
UNION ALL SELECT trace_id, 'send', send_start, (send_end - send_start) / 1e9 FROM fresh WHERE send_start IS NOT NULL
UNION ALL SELECT trace_id, segment, NULL, duration_s FROM (
    SELECT n.trace_id, unnest(['queue', 'prefill', 'decode']) AS segment, unnest([n.queue_s, n.prefill_s, n.decode_s]) AS duration_s
    FROM new_requests n JOIN fresh f USING (trace_id) WHERE f.name = 'llm_request'
) WHERE duration_s IS NOT NULL
UNION ALL SELECT trace_id, 'other', NULL, other_s FROM new_requests;
