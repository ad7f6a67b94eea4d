-- Per deployment and tier: requests and the span of arrivals in the window, to choose the regression search's bucket.
SELECT deployment, tier, count(*) AS requests, epoch(max(ts)) - epoch(min(ts)) AS seconds
FROM requests
WHERE ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
  AND ($deployment IS NULL OR deployment = $deployment)
GROUP BY ALL;
