-- Per replica: the share of requests it took, its p95 queue wait, prefix-cache hits and retries, and its first request
-- of the range (a replica added by a scale-out starts late, and empty).
SELECT deployment, replica,
    count(*) AS requests,
    quantile_cont(queue_s, 0.95) FILTER (WHERE outcome = 'ok') AS queue_p95_s,
    sum(coalesce(cached_tokens, 0)) / greatest(sum(coalesce(input_tokens, 0)), 1) AS cache_hit_ratio,
    count(*) FILTER (WHERE coalesce(retries, 0) > 0) AS retried,
    count(*) FILTER (WHERE outcome <> 'ok') AS failed,
    min(ts) AS first_seen
FROM ({filtered})
WHERE replica IS NOT NULL
GROUP BY ALL ORDER BY deployment, replica;
