-- Per deployment and tier, from the traces: requests, SLO attainment (TTFT and TPOT against the tier and
-- route's thresholds from rules/slos.yaml, as lists), p95s and tokens served within the SLO.
WITH r AS ({filtered}),
slo AS (SELECT unnest($slo_tier) AS tier, unnest($slo_route) AS route, unnest($slo_ttft) AS ttft_max,
               unnest($slo_tpot) AS tpot_max),
j AS (
    SELECT r.*, slo.ttft_max, slo.tpot_max,
        outcome = 'ok' AND ttft_s <= ttft_max AS ttft_met,
        outcome = 'ok' AND coalesce(tpot_s, 0) <= tpot_max AS tpot_met
    FROM r LEFT JOIN slo ON r.tier = slo.tier AND r.route = slo.route
)
SELECT deployment, tier,
    count(*) AS requests,
    count(*) FILTER (WHERE outcome = 'ok') AS ok,
    count(*) FILTER (WHERE ttft_max IS NOT NULL) AS with_slo,
    count(*) FILTER (WHERE ttft_met) AS ttft_met,
    count(*) FILTER (WHERE tpot_met) AS tpot_met,
    count(*) FILTER (WHERE ttft_met AND tpot_met) AS slo_met,
    quantile_cont(ttft_s, 0.95) FILTER (WHERE outcome = 'ok') AS ttft_p95_s,
    quantile_cont(tpot_s, 0.95) FILTER (WHERE outcome = 'ok') AS tpot_p95_s,
    quantile_cont(queue_s, 0.95) FILTER (WHERE outcome = 'ok') AS queue_p95_s,
    sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)) AS tokens,
    sum(coalesce(input_tokens, 0) + coalesce(output_tokens, 0)) FILTER (WHERE ttft_met AND tpot_met) AS good_tokens,
    sum(coalesce(preemptions, 0)) AS preemptions
FROM j GROUP BY ALL ORDER BY deployment, tier;
