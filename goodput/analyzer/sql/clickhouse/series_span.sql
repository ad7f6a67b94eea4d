-- Per deployment and tier: requests and the span of arrivals in the window (goodput/analyzer/sql/series_span.sql).
WITH __requests__
SELECT deployment, tier, count() AS requests,
    (toUnixTimestamp64Micro(max(ts)) - toUnixTimestamp64Micro(min(ts))) / 1e6 AS seconds
FROM requests
WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
  AND ({deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)})
GROUP BY ALL
