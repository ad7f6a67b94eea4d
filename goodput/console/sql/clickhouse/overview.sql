-- Per deployment and tier (goodput/console/sql/overview.sql): requests, SLO attainment (TTFT and TPOT against the tier and
-- route's thresholds, {slo_tier}, {slo_route}, {slo_ttft}, {slo_tpot}: parallel arrays from rules/slos.yaml), p95s
-- and tokens served within the SLO.
WITH __requests__,
slo AS (
    SELECT t.1 AS tier, t.2 AS route, t.3 AS ttft_max, t.4 AS tpot_max
    FROM (SELECT arrayJoin(arrayZip({slo_tier:Array(String)}, {slo_route:Array(String)}, {slo_ttft:Array(Float64)},
                                    {slo_tpot:Array(Float64)})) AS t)
),
r AS ({filtered}),
j AS (
    SELECT r.deployment AS deployment, r.tier AS tier, r.outcome AS outcome, r.ttft_s AS ttft_s, r.tpot_s AS tpot_s,
        r.queue_s AS queue_s, r.input_tokens AS input_tokens, r.output_tokens AS output_tokens,
        r.preemptions AS preemptions, slo.ttft_max AS ttft_max,
        coalesce(r.outcome = 'ok' AND r.ttft_s <= slo.ttft_max, false) AS ttft_met,
        coalesce(r.outcome = 'ok' AND coalesce(r.tpot_s, 0) <= slo.tpot_max, false) AS tpot_met
    FROM r LEFT JOIN slo ON r.tier = slo.tier AND r.route = slo.route
)
SELECT deployment, tier,
    count() AS requests,
    countIf(outcome = 'ok') AS ok,
    countIf(ttft_max IS NOT NULL) AS with_slo,
    countIf(ttft_met) AS ttft_met,
    countIf(tpot_met) AS tpot_met,
    countIf(ttft_met AND tpot_met) AS slo_met,
    quantileExactInclusiveIf(0.95)(ttft_s, outcome = 'ok') AS ttft_p95_s,
    quantileExactInclusiveIf(0.95)(tpot_s, outcome = 'ok') AS tpot_p95_s,
    quantileExactInclusiveIf(0.95)(queue_s, outcome = 'ok') AS queue_p95_s,
    sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)) AS tokens,
    sumIf(coalesce(input_tokens, 0) + coalesce(output_tokens, 0), ttft_met AND tpot_met) AS good_tokens,
    sum(coalesce(preemptions, 0)) AS preemptions
FROM j GROUP BY deployment, tier ORDER BY deployment, tier
