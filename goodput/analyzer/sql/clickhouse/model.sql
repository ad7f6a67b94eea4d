-- The analyzer's request model over a `spans` CTE of spans.sql's rows: the CTEs that end in `requests` (the columns of
-- goodput/analyzer/sql/schema.sql's requests table, and the engine span's id and start), `early_only` (requests in
-- flight; `early` with the closed ones) and `admission_spans`. One text for every path: read time (requests.sql: the
-- window's spans of otel_traces; goodput/analyzer/backend.py derives it once per command and window into temporary
-- tables), the backfill of `goodput analyze prepare` (the stored goodput_spans of a chunk of hours) and its
-- materialized views (the traces an insert touched: their stored spans and the insert block); prepare/*.sql.
-- The same rules as goodput/analyzer/sql/normalize_spans.sql:
-- every engine span (`llm.request`, goodput's; `llm_request`, vLLM's) at any depth is one request; what it inherits
-- comes from the call, then its ancestors nearest first, then any span of the trace (tenant, tier, route, scene);
-- its gateway and send time from the nearest enclosing SERVER span, shared out among several calls under it.
engine AS (   -- engine calls, one row per (trace, span) however often the span was exported (not
    -- materialized: chDB 4.4 answered the in-flight requests wrong when it was)
    SELECT trace_id, span_id, parent_span_id, name, server, start_ns, end_ns, error,
        coalesce(deployment_attr, nullIf(service, '')) AS deployment, coalesce(a_request_id, span_id) AS request_id,
        model, replica, tenant, tier, route, scene, a_input, a_output, a_cached, a_preemptions, a_outcome,
        finish_reason, reject_reason, degraded, fallback_from, fallback_reason, l_queue, l_prefill, l_decode, l_e2e, l_ttft
    FROM spans
    WHERE name IN ('llm.request', 'llm_request')
    LIMIT 1 BY trace_id, span_id
), usable AS (
    SELECT * FROM engine WHERE end_ns >= start_ns AND start_ns > 0 AND deployment IS NOT NULL
), kids AS MATERIALIZED (   -- goodput's segment spans, folded per parent
    SELECT trace_id, parent_span_id AS span_id,
        minIfOrNull(start_ns, name = 'llm.gateway') AS gateway_start, maxIfOrNull(end_ns, name = 'llm.gateway') AS gateway_end,
        minIfOrNull(start_ns, name = 'llm.queue') AS queue_start, maxIfOrNull(end_ns, name = 'llm.queue') AS queue_end,
        minIfOrNull(start_ns, name = 'llm.prefill') AS prefill_start, maxIfOrNull(end_ns, name = 'llm.prefill') AS prefill_end,
        minIfOrNull(start_ns, name = 'llm.decode') AS decode_start, maxIfOrNull(end_ns, name = 'llm.decode') AS decode_end,
        minIfOrNull(start_ns, name = 'llm.send') AS send_start, maxIfOrNull(end_ns, name = 'llm.send') AS send_end,
        -- P/D disaggregation: the KV cache's move from the prefill replica to the decode replica
        minIfOrNull(start_ns, name = 'llm.kv_transfer') AS kv_transfer_start,
        maxIfOrNull(end_ns, name = 'llm.kv_transfer') AS kv_transfer_end,
        anyIf(prefill_replica, name = 'llm.kv_transfer') AS prefill_replica,
        anyIf(deployment_attr, name = 'llm.gateway') AS deployment,
        anyIf(tenant, name = 'llm.gateway') AS tenant, anyIf(tier, name = 'llm.gateway') AS tier
    FROM spans
    WHERE name IN ('llm.gateway', 'llm.queue', 'llm.prefill', 'llm.kv_transfer', 'llm.decode', 'llm.send')
    GROUP BY trace_id, parent_span_id
), roots AS (
    SELECT trace_id, span_id FROM engine WHERE name = 'llm.request'
), early AS (   -- every request's early spans (gateway, queue) that name their deployment; `open` while its root and
    -- later segments are not (yet) stored (a prepared table keeps the closed rows: they supersede the open ones)
    SELECT k.trace_id AS trace_id, k.span_id AS parent_span_id, k.deployment AS deployment, k.tenant AS tenant,
        k.tier AS tier, k.gateway_start AS gateway_start, k.gateway_end AS gateway_end, k.queue_end AS queue_end,
        k.prefill_start IS NULL AND k.kv_transfer_start IS NULL AND k.decode_start IS NULL AND k.send_start IS NULL
            AND (k.trace_id, k.span_id) NOT IN (SELECT trace_id, span_id FROM roots) AS open
    FROM kids k
    WHERE k.gateway_start IS NOT NULL AND k.deployment IS NOT NULL
), early_only AS (   -- requests in flight
    SELECT * EXCEPT open FROM early WHERE open
), admission_spans AS (   -- the deployments (and days) whose gateway writes early spans
    SELECT DISTINCT deployment, toDate(fromUnixTimestamp64Nano(gateway_start)) AS day
    FROM kids WHERE deployment IS NOT NULL
), calls AS MATERIALIZED (   -- with --span-format both a request shows twice (llm.request and llm_request): llm.request kept
    SELECT * FROM usable
    WHERE NOT (name = 'llm_request' AND (trace_id, request_id) IN (
        SELECT trace_id, request_id FROM usable WHERE name = 'llm.request'))
), nested AS (   -- traces where a call has a parent: only these have a lineage to walk
    SELECT DISTINCT trace_id FROM calls WHERE parent_span_id <> ''
), nodes AS MATERIALIZED (
    SELECT trace_id, span_id, any(parent_span_id) AS parent_span_id, any(server) AS server, any(start_ns) AS start_ns,
        any(end_ns) AS end_ns, any(tenant) AS tenant, any(tier) AS tier, any(route) AS route, any(scene) AS scene,
        any(model) AS model, any(a_input) AS a_input, any(a_output) AS a_output
    FROM spans
    WHERE trace_id IN (SELECT trace_id FROM nested)
      AND name NOT IN ('llm.gateway', 'llm.queue', 'llm.prefill', 'llm.kv_transfer', 'llm.decode', 'llm.send')
    GROUP BY trace_id, span_id
), lineage AS (
    SELECT u.trace_id AS l_trace_id, u.call AS l_span_id,
        argMinIfOrNull(n.tenant, u.depth, n.tenant IS NOT NULL) AS l_tenant,
        argMinIfOrNull(n.tier, u.depth, n.tier IS NOT NULL) AS l_tier,
        argMinIfOrNull(n.route, u.depth, n.route IS NOT NULL) AS l_route,
        argMinIfOrNull(n.scene, u.depth, n.scene IS NOT NULL) AS l_scene,
        argMinIfOrNull(n.model, u.depth, n.model IS NOT NULL) AS l_model,
        argMinIfOrNull(n.a_input, u.depth, n.a_input IS NOT NULL) AS l_input,
        argMinIfOrNull(n.a_output, u.depth, n.a_output IS NOT NULL) AS l_output,
        argMinIfOrNull(n.span_id, u.depth, n.server) AS server_id,
        argMinIfOrNull(n.start_ns, u.depth, n.server) AS server_start,
        argMinIfOrNull(n.end_ns, u.depth, n.server) AS server_end
    FROM (   -- every ancestor of every call, nearest first (recursive here: a recursive WITH cannot materialize)
        WITH RECURSIVE up AS (
    SELECT n.trace_id AS trace_id, c.span_id AS call, n.span_id AS span_id, n.parent_span_id AS parent_span_id,
        1 AS depth
    FROM calls c JOIN nodes n ON n.trace_id = c.trace_id AND n.span_id = c.parent_span_id
    WHERE c.parent_span_id <> ''
    UNION ALL
    SELECT n.trace_id, u.call, n.span_id, n.parent_span_id, u.depth + 1
    FROM up u JOIN nodes n ON n.trace_id = u.trace_id AND n.span_id = u.parent_span_id
    WHERE u.parent_span_id <> '' AND u.depth < 64            -- a cycle of parent ids ends here
        )
        SELECT * FROM up
    ) u JOIN nodes n ON n.trace_id = u.trace_id AND n.span_id = u.span_id
    GROUP BY u.trace_id, u.call
), trace_context AS (
    SELECT trace_id AS t_trace_id,
        argMinIfOrNull(tenant, start_ns, tenant IS NOT NULL) AS t_tenant,
        argMinIfOrNull(tier, start_ns, tier IS NOT NULL) AS t_tier,
        argMinIfOrNull(route, start_ns, route IS NOT NULL) AS t_route,
        argMinIfOrNull(scene, start_ns, scene IS NOT NULL) AS t_scene
    FROM nodes GROUP BY trace_id
), placed AS (
    SELECT c.*, l.server_id, l.server_start, l.server_end,
        coalesce(c.tenant, l.l_tenant, t.t_tenant) AS w_tenant, coalesce(c.tier, l.l_tier, t.t_tier) AS w_tier,
        coalesce(c.route, l.l_route, t.t_route) AS w_route, coalesce(c.scene, l.l_scene, t.t_scene) AS w_scene,
        coalesce(c.model, l.l_model) AS w_model, coalesce(c.a_input, l.l_input) AS w_input,
        coalesce(c.a_output, l.l_output) AS w_output
    FROM calls c LEFT JOIN lineage l ON l.l_trace_id = c.trace_id AND l.l_span_id = c.span_id
    LEFT JOIN trace_context t ON t.t_trace_id = c.trace_id
), ranked AS (
    SELECT *,
        row_number() OVER (PARTITION BY trace_id ORDER BY start_ns, span_id) - 1 AS retries,
        row_number() OVER (PARTITION BY trace_id, server_id ORDER BY start_ns, span_id) = 1 AS first,
        row_number() OVER (PARTITION BY trace_id, server_id ORDER BY end_ns DESC, span_id) = 1 AS last,
        maxOrNull(end_ns) OVER (PARTITION BY trace_id, server_id ORDER BY start_ns, span_id
                                ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_end
    FROM placed
), windows AS (
    SELECT *,
        CASE WHEN server_id IS NULL THEN start_ns WHEN first THEN server_start
             ELSE least(start_ns, prev_end) END AS w_start,
        CASE WHEN server_id IS NULL OR NOT last THEN end_ns ELSE server_end END AS w_end
    FROM ranked
), base AS (
    SELECT w.*, k.gateway_start, k.gateway_end, k.queue_start, k.queue_end, k.prefill_start, k.prefill_end,
        k.decode_start, k.decode_end, k.send_start, k.send_end, k.kv_transfer_start, k.kv_transfer_end, k.prefill_replica,
        w.name = 'llm_request' AS vllm, w.server_id IS NOT NULL AS served, w.start_ns AS call_start_ns,
        (w.end_ns - w.start_ns) / 1e9 AS span_s,
        (w.start_ns - w.w_start) / 1e9 AS before_s,   -- gateway time outside the engine span
        (w.w_end - w.end_ns) / 1e9 AS after_s         -- send time outside the engine span
    FROM windows w LEFT JOIN kids k
        ON k.trace_id = w.trace_id AND k.span_id = if(w.name = 'llm.request', w.span_id, '-')
), seg AS (
    SELECT *,
        CASE WHEN served THEN before_s + coalesce((gateway_end - gateway_start) / 1e9, 0)
             ELSE (gateway_end - gateway_start) / 1e9 END AS gateway_s,
        CASE WHEN vllm THEN toFloat64OrNull(l_queue) ELSE (queue_end - queue_start) / 1e9 END AS queue_s,
        CASE WHEN vllm THEN toFloat64OrNull(l_prefill) ELSE (prefill_end - prefill_start) / 1e9 END AS prefill_s,
        (kv_transfer_end - kv_transfer_start) / 1e9 AS kv_transfer_s,
        CASE WHEN vllm THEN toFloat64OrNull(l_decode) ELSE (decode_end - decode_start) / 1e9 END AS decode_s,
        CASE WHEN served THEN after_s + coalesce((send_end - send_start) / 1e9, 0)
             ELSE (send_end - send_start) / 1e9 END AS send_s,
        CASE WHEN served THEN (w_end - w_start) / 1e9
             WHEN vllm THEN coalesce(toFloat64OrNull(l_e2e), span_s) ELSE span_s END AS e2e_s,
        -- the first token: where decode starts (after the KV transfer, disaggregated), else where prefill ends
        before_s + CASE WHEN vllm THEN toFloat64OrNull(l_ttft)
                        WHEN decode_start IS NOT NULL THEN (if(kv_transfer_end IS NOT NULL, decode_start, prefill_end)
                                                            - start_ns) / 1e9 END AS ttft_s,
        toInt64OrNull(w_output) AS output_tokens
    FROM base
), requests AS MATERIALIZED (
    SELECT trace_id, request_id,
        fromUnixTimestamp64Micro(intDiv(w_start, 1000), 'UTC') AS ts, w_start AS start_ns, w_end AS end_ns,
        w_model AS model, deployment, replica, coalesce(w_tenant, 'unknown') AS tenant,
        coalesce(w_tier, 'unknown') AS tier, coalesce(w_route, 'unknown') AS route, w_scene AS scene,
        toInt64OrNull(w_input) AS input_tokens, output_tokens,
        toInt64OrNull(a_cached) AS cached_tokens, toInt64OrNull(a_preemptions) AS preemptions,
        coalesce(a_outcome, CASE WHEN error THEN 'error' WHEN finish_reason = 'abort' THEN 'cancelled'
                                 ELSE 'ok' END) AS outcome,
        finish_reason, reject_reason,
        gateway_s, queue_s, prefill_s, decode_s, send_s,
        e2e_s - (coalesce(gateway_s, 0) + coalesce(queue_s, 0) + coalesce(prefill_s, 0) + coalesce(kv_transfer_s, 0)
                 + coalesce(decode_s, 0) + coalesce(send_s, 0)) AS other_s,
        e2e_s, ttft_s,
        ttft_s - (coalesce(gateway_s, 0) + coalesce(queue_s, 0) + coalesce(prefill_s, 0) + coalesce(kv_transfer_s, 0))
            AS ttft_other_s,
        CASE WHEN output_tokens > 1 AND ttft_s IS NOT NULL THEN (e2e_s - ttft_s) / (output_tokens - 1) END AS tpot_s,
        toInt32(retries) AS retries, degraded, fallback_from, fallback_reason, kv_transfer_s, prefill_replica,
        span_id, call_start_ns   -- the engine span: a prepared table's key (prepare/requests_table.sql)
    FROM seg
)
