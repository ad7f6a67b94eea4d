-- Per replica of one deployment in the recent period: load and queue wait (routing imbalance).
SELECT replica, count(*) AS requests, quantile_cont(queue_s, 0.95) FILTER (WHERE outcome = 'ok') AS queue_p95
FROM requests
WHERE deployment = $deployment AND ts >= $split AND ($until IS NULL OR ts < $until) AND replica IS NOT NULL
GROUP BY replica ORDER BY replica;
