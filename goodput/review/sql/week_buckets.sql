-- The review's weeks from the trace store: per 5-minute bucket, deployment, tier and route, the requests,
-- tokens, outcomes and how many met their tier/route's TTFT and TPOT thresholds ($slo_tier, $slo_route, $slo_ttft,
-- $slo_tpot: parallel lists from rules/slos.yaml).
WITH slo AS (
    SELECT unnest($slo_tier) AS tier, unnest($slo_route) AS route, unnest($slo_ttft) AS ttft_seconds,
           unnest($slo_tpot) AS tpot_seconds
)
SELECT
    time_bucket(INTERVAL 5 MINUTE, r.ts) AS bucket,
    r.deployment, r.tier, r.route,
    count(*) AS requests,
    sum(coalesce(r.input_tokens, 0)) FILTER (WHERE r.outcome <> 'rejected') AS input_tokens,
    sum(coalesce(r.output_tokens, 0)) FILTER (WHERE r.outcome = 'ok') AS output_tokens,
    count(*) FILTER (WHERE r.outcome = 'timeout') AS timeouts,
    count(*) FILTER (WHERE r.outcome = 'rejected' AND r.reject_reason = 'kv_capacity') AS kv_rejections,
    count(*) FILTER (WHERE r.outcome = 'rejected' AND coalesce(r.reject_reason, '') <> 'kv_capacity') AS other_rejections,
    sum(coalesce(r.preemptions, 0)) AS preemptions,
    count(*) FILTER (WHERE r.ttft_s IS NOT NULL) AS ttft_n,
    count(*) FILTER (WHERE r.ttft_s <= s.ttft_seconds) AS ttft_good,
    count(*) FILTER (WHERE r.tpot_s IS NOT NULL) AS tpot_n,
    count(*) FILTER (WHERE r.tpot_s <= s.tpot_seconds) AS tpot_good
FROM requests r
LEFT JOIN slo s ON s.tier = r.tier AND s.route = r.route
WHERE r.ts >= $since AND r.ts < $until
GROUP BY ALL
