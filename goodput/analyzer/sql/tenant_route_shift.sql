-- Which tenants and routes moved: for each change point, the median over buckets of the per-bucket p95 of its metric,
-- before and after it, per tenant and per route. Change points as parallel lists: $ids, $deployments, $tiers,
-- $metrics (allow-listed: goodput/analyzer/regressions.py METRICS), $ats, $starts, $ends; $bucket an interval.
WITH cp AS (
    SELECT unnest($ids) AS id, unnest($deployments) AS deployment, unnest($tiers) AS tier, unnest($metrics) AS metric,
           unnest($ats::TIMESTAMPTZ[]) AS cp_at, unnest($starts::TIMESTAMPTZ[]) AS start_ts,
           unnest($ends::TIMESTAMPTZ[]) AS end_ts
), r AS (
    SELECT c.id, c.cp_at, q.tenant, q.route, q.ts,
        CASE c.metric WHEN 'e2e_s' THEN q.e2e_s WHEN 'ttft_s' THEN q.ttft_s WHEN 'tpot_s' THEN q.tpot_s
             WHEN 'gateway_s' THEN q.gateway_s WHEN 'queue_s' THEN q.queue_s WHEN 'prefill_s' THEN q.prefill_s
             WHEN 'kv_transfer_s' THEN q.kv_transfer_s
             WHEN 'decode_s' THEN q.decode_s WHEN 'send_s' THEN q.send_s END AS v
    FROM cp c JOIN requests q ON q.deployment = c.deployment AND q.tier = c.tier AND q.outcome = 'ok'
        AND q.ts >= c.start_ts AND q.ts < c.end_ts
), b AS (
    SELECT id, any_value(cp_at) AS cp_at, dim, value, time_bucket($bucket, ts) AS bucket, quantile_cont(v, 0.95) AS p95
    FROM (SELECT id, cp_at, 'tenant' AS dim, tenant AS value, ts, v FROM r
          UNION ALL
          SELECT id, cp_at, 'route', route, ts, v FROM r)
    GROUP BY id, dim, value, bucket
)
SELECT id, dim, value, median(p95) FILTER (WHERE bucket < cp_at) AS before, median(p95) FILTER (WHERE bucket >= cp_at) AS after,
       count(*) AS buckets
FROM b GROUP BY id, dim, value
ORDER BY id, dim, value;
