-- Preemptions and KV-capacity rejections per time bucket (goodput/console/sql/kv.sql); {bucket_us}: the bucket in
-- microseconds, from DuckDB's time_bucket origin (2000-01-03).
WITH __requests__
SELECT fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000, {bucket_us:Int64}) * {bucket_us:Int64}, 'UTC') AS bucket, deployment,
    count() AS requests,
    sum(coalesce(preemptions, 0)) AS preemptions,
    countIf(reject_reason = 'kv_capacity') AS kv_rejections,
    countIf(outcome = 'rejected') AS rejected
FROM ({filtered})
GROUP BY bucket, deployment ORDER BY bucket, deployment
