-- Which tenants and routes moved: the median over buckets of the per-bucket p95 of one metric, before and
-- after a change point, per tenant and per route. {metric} is an allow-listed column; the rest parameters.
WITH b AS (
    SELECT dim, value, time_bucket($bucket, ts) AS bucket, quantile_cont({metric}, 0.95) AS p95
    FROM (
        SELECT 'tenant' AS dim, tenant AS value, ts, {metric} FROM requests
        WHERE deployment = $deployment AND tier = $tier AND outcome = 'ok' AND ts >= $start AND ts < $end
        UNION ALL
        SELECT 'route', route, ts, {metric} FROM requests
        WHERE deployment = $deployment AND tier = $tier AND outcome = 'ok' AND ts >= $start AND ts < $end
    )
    GROUP BY ALL
)
SELECT dim, value, median(p95) FILTER (WHERE bucket < $at) AS before, median(p95) FILTER (WHERE bucket >= $at) AS after,
       count(*) AS buckets
FROM b GROUP BY ALL;
