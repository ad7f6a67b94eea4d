-- Per replica (goodput/console/sql/routing.sql): the share of requests it took, its p95 queue wait, prefix-cache hits and
-- retries, and its first request of the range.
WITH __requests__
SELECT deployment, replica,
    count() AS requests,
    quantileExactInclusiveIf(0.95)(queue_s, outcome = 'ok') AS queue_p95_s,
    sum(coalesce(cached_tokens, 0)) / greatest(sum(coalesce(input_tokens, 0)), 1) AS cache_hit_ratio,
    countIf(coalesce(retries, 0) > 0) AS retried,
    countIf(outcome <> 'ok') AS failed,
    min(ts) AS first_seen
FROM ({filtered})
WHERE replica IS NOT NULL
GROUP BY deployment, replica ORDER BY deployment, replica
