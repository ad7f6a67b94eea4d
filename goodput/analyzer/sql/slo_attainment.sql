-- Per deployment: the share of finished requests that met their (tier, route) SLO's TTFT and TPOT thresholds, over
-- the requests an SLO covers ($slo_tier, $slo_route, $slo_ttft, $slo_tpot: parallel lists from rules/slos.yaml).
WITH slo AS (
    SELECT unnest($slo_tier) AS tier, unnest($slo_route) AS route, unnest($slo_ttft) AS ttft_s, unnest($slo_tpot) AS tpot_s
)
SELECT r.deployment, count(*) AS requests,
    avg(CASE WHEN r.outcome = 'ok' AND r.ttft_s <= slo.ttft_s AND coalesce(r.tpot_s, 0) <= slo.tpot_s THEN 1 ELSE 0 END)
        AS attainment
FROM requests r JOIN slo ON r.tier = slo.tier AND r.route = slo.route
WHERE ($since IS NULL OR r.ts >= $since) AND ($until IS NULL OR r.ts < $until)
GROUP BY r.deployment
ORDER BY attainment, requests DESC, r.deployment;
