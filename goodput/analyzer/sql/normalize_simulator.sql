-- The simulator's requests.parquet (view `sim`) -> requests and segments. Its timestamps are the ground
-- truth; segments follow the same rules as its OTLP spans (goodput/simulator/spans.py). The record has no KV-transfer time:
-- a disaggregated run's transfer is read from its spans (llm.kv_transfer).
-- a record from before the overload ladder and fallback routes has none of their columns
ALTER TABLE sim ADD COLUMN IF NOT EXISTS degraded VARCHAR;
ALTER TABLE sim ADD COLUMN IF NOT EXISTS fallback_from VARCHAR;
ALTER TABLE sim ADD COLUMN IF NOT EXISTS fallback_reason VARCHAR;
CREATE OR REPLACE TEMP TABLE simq AS
SELECT *, epoch_ns(arrival) AS a, epoch_ns(queue_start) AS q, epoch_ns(scheduled) AS sc,
       epoch_ns(first_token) AS ft, epoch_ns(last_token) AS lt, epoch_ns(completed) AS c
FROM sim;

INSERT INTO quarantine (source, trace_id, span_id, reason, detail)
SELECT source, trace_id, NULL, 'request has no arrival or completion time, or completes before it arrives', finish_reason
FROM simq WHERE a IS NULL OR c IS NULL OR c < a;

CREATE OR REPLACE TEMP TABLE sim_fresh AS
SELECT *,
    CASE WHEN q IS NOT NULL AND q <= c THEN q ELSE c END AS gw_end,
    (sc IS NOT NULL OR finish_reason IN ('timeout', 'error', 'abort')) AND q IS NOT NULL AND q <= c AS enqueued
FROM simq
WHERE a IS NOT NULL AND c IS NOT NULL AND c >= a
  AND NOT EXISTS (SELECT 1 FROM requests r WHERE r.trace_id = simq.trace_id AND r.request_id = simq.request_id);

CREATE OR REPLACE TEMP TABLE sim_new AS
WITH seg AS (
    SELECT *,
        (gw_end - a) / 1e9 AS gateway_s,
        CASE WHEN enqueued THEN (coalesce(sc, c) - q) / 1e9 END AS queue_s,
        CASE WHEN sc IS NOT NULL THEN (coalesce(ft, c) - sc) / 1e9 END AS prefill_s,
        CASE WHEN ft IS NOT NULL THEN (coalesce(lt, c) - ft) / 1e9 END AS decode_s,
        CASE WHEN lt IS NOT NULL THEN (c - lt) / 1e9 END AS send_s,
        (c - a) / 1e9 AS e2e_s,
        CASE WHEN ft IS NOT NULL THEN (ft - a) / 1e9 END AS ttft_s
    FROM sim_fresh
)
SELECT trace_id, request_id, arrival AS ts, a AS start_ns, c AS end_ns, model, deployment, nullif(replica, '') AS replica,
       tenant, tier, route, scene, input_tokens, output_tokens, cached_tokens, preemptions, outcome, finish_reason,
       reject_reason, gateway_s, queue_s, prefill_s, decode_s, send_s,
       other_seconds(e2e_s, gateway_s, queue_s, prefill_s, NULL, decode_s, send_s) AS other_s,
       e2e_s, ttft_s,
       ttft_other_seconds(ttft_s, gateway_s, queue_s, prefill_s, NULL) AS ttft_other_s,
       tpot_seconds(e2e_s, ttft_s, output_tokens) AS tpot_s,
       source,
       -- requests of one trace (a caller's traceparent continued by the live fleet): the earlier ones were retried
       (row_number() OVER (PARTITION BY trace_id ORDER BY a, request_id) - 1)::INTEGER AS retries,
       nullif(degraded, '') AS degraded, nullif(fallback_from, '') AS fallback_from,
       nullif(fallback_reason, '') AS fallback_reason
FROM seg ORDER BY a;

INSERT INTO requests BY NAME SELECT * FROM sim_new ORDER BY start_ns;

INSERT INTO segments (trace_id, request_id, segment, start_ns, duration_s)
SELECT trace_id, request_id, 'gateway', a, (gw_end - a) / 1e9 FROM sim_fresh
UNION ALL SELECT trace_id, request_id, 'queue', q, (coalesce(sc, c) - q) / 1e9 FROM sim_fresh WHERE enqueued
UNION ALL SELECT trace_id, request_id, 'prefill', sc, (coalesce(ft, c) - sc) / 1e9 FROM sim_fresh WHERE sc IS NOT NULL
UNION ALL SELECT trace_id, request_id, 'decode', ft, (coalesce(lt, c) - ft) / 1e9 FROM sim_fresh WHERE ft IS NOT NULL
UNION ALL SELECT trace_id, request_id, 'send', lt, (c - lt) / 1e9 FROM sim_fresh WHERE lt IS NOT NULL
UNION ALL SELECT trace_id, request_id, 'other', NULL, other_s FROM sim_new;

-- a simulator run's record holds every request it made, run to completion: nothing of it is in flight
INSERT INTO admission_spans
SELECT deployment, min(start_ns) FROM sim_new
WHERE deployment NOT IN (SELECT deployment FROM admission_spans) GROUP BY deployment;
