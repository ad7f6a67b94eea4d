-- The reviewed week's requests and tokens per deployment, tier and tenant (totals, not series).
SELECT deployment, tier, coalesce(tenant, 'unknown') AS tenant, count(*) AS requests,
       sum(coalesce(input_tokens, 0)) FILTER (WHERE outcome <> 'rejected')
       + coalesce(sum(output_tokens) FILTER (WHERE outcome = 'ok'), 0) AS tokens
FROM requests
WHERE ts >= $since AND ts < $until
GROUP BY ALL
