-- Per deployment: the share of finished requests that met their (tier, route) SLO (goodput/analyzer/sql/slo_attainment.sql);
-- {slo_tier}, {slo_route}, {slo_ttft}, {slo_tpot}: parallel arrays from rules/slos.yaml.
WITH __requests__,
slo AS (
    SELECT t.1 AS tier, t.2 AS route, t.3 AS slo_ttft_s, t.4 AS slo_tpot_s
    FROM (SELECT arrayJoin(arrayZip({slo_tier:Array(String)}, {slo_route:Array(String)}, {slo_ttft:Array(Float64)},
                                    {slo_tpot:Array(Float64)})) AS t)
)
SELECT r.deployment, count() AS requests,
    avg(if(r.outcome = 'ok' AND r.ttft_s <= slo.slo_ttft_s AND coalesce(r.tpot_s, 0) <= slo.slo_tpot_s, 1, 0))
        AS attainment
FROM requests r JOIN slo ON r.tier = slo.tier AND r.route = slo.route
WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR r.ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR r.ts < {until:Nullable(DateTime64(6, 'UTC'))})
GROUP BY r.deployment
ORDER BY attainment, requests DESC, r.deployment
