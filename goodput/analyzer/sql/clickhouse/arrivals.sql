-- Arrivals per bucket and deployment by arrival time, finished and in flight (goodput/analyzer/sql/arrivals.sql).
-- {bucket_us}: the bucket in microseconds, from DuckDB's time_bucket origin (2000-01-03); the filters NULL = any.
WITH __requests__
SELECT fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000, {bucket_us:Int64}) * {bucket_us:Int64}, 'UTC') AS bucket, deployment,
    count() AS arrivals, countIf(open) AS in_flight
FROM (
    SELECT ts, deployment, tier, tenant, false AS open FROM requests
    UNION ALL
    SELECT fromUnixTimestamp64Micro(intDiv(gateway_start, 1000), 'UTC'), deployment, tier, tenant, true FROM early_only
)
WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
  AND ({deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)})
  AND ({tier:Nullable(String)} IS NULL OR tier = {tier:Nullable(String)})
  AND ({tenant:Nullable(String)} IS NULL OR tenant = {tenant:Nullable(String)})
GROUP BY ALL ORDER BY bucket, deployment
