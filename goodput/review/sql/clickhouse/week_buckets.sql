-- The review's weeks from the Collector's otel_traces (goodput/review/sql/week_buckets.sql): per 5-minute bucket,
-- deployment, tier and route, the requests, tokens, outcomes and how many met their tier/route's TTFT and TPOT
-- thresholds ({slo_tier}, {slo_route}, {slo_ttft}, {slo_tpot}: parallel arrays from rules/slos.yaml).
WITH __requests__,
slo AS (
    SELECT t.1 AS tier, t.2 AS route, t.3 AS ttft_seconds, t.4 AS tpot_seconds
    FROM (SELECT arrayJoin(arrayZip({slo_tier:Array(String)}, {slo_route:Array(String)}, {slo_ttft:Array(Float64)},
                                    {slo_tpot:Array(Float64)})) AS t)
)
SELECT
    toStartOfInterval(r.ts, INTERVAL 5 MINUTE, 'UTC') AS bucket,
    r.deployment AS deployment, r.tier AS tier, r.route AS route,
    count() AS requests,
    sumIf(coalesce(r.input_tokens, 0), r.outcome <> 'rejected') AS input_tokens,
    sumIf(coalesce(r.output_tokens, 0), r.outcome = 'ok') AS output_tokens,
    countIf(r.outcome = 'timeout') AS timeouts,
    countIf(r.outcome = 'rejected' AND r.reject_reason = 'kv_capacity') AS kv_rejections,
    countIf(r.outcome = 'rejected' AND coalesce(r.reject_reason, '') <> 'kv_capacity') AS other_rejections,
    sum(coalesce(r.preemptions, 0)) AS preemptions,
    countIf(r.ttft_s IS NOT NULL) AS ttft_n,
    countIf(coalesce(r.ttft_s <= s.ttft_seconds, false)) AS ttft_good,
    countIf(r.tpot_s IS NOT NULL) AS tpot_n,
    countIf(coalesce(r.tpot_s <= s.tpot_seconds, false)) AS tpot_good
FROM requests r
LEFT JOIN slo s ON s.tier = r.tier AND s.route = r.route
WHERE r.ts >= {since:DateTime64(6, 'UTC')} AND r.ts < {until:DateTime64(6, 'UTC')}
GROUP BY bucket, deployment, tier, route
