-- The first and last arrival of one deployment in the window (goodput/analyzer/sql/deployment_span.sql).
WITH __requests__
SELECT minOrNull(ts), maxOrNull(ts)
FROM requests
WHERE deployment = {deployment:String}
  AND ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
