-- Per replica of one deployment in the recent period: load and queue wait (goodput/analyzer/sql/replicas.sql).
WITH __requests__
SELECT replica, count() AS requests, quantileExactInclusiveIf(0.95)(queue_s, outcome = 'ok') AS queue_p95
FROM requests
WHERE deployment = {deployment:String} AND ts >= {split:DateTime64(6, 'UTC')}
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))}) AND replica IS NOT NULL
GROUP BY replica ORDER BY replica
