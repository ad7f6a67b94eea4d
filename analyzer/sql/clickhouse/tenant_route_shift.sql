-- Which tenants and routes moved across a change point (analyzer/sql/tenant_route_shift.sql). {metric} is an
-- allow-listed column; {bucket} seconds.
WITH __requests__,
b AS (
    SELECT dim, value, fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000, toInt64({bucket:Float64} * 1e6)) * toInt64({bucket:Float64} * 1e6), 'UTC') AS bucket, quantileExactInclusive(0.95)({metric}) AS p95
    FROM (
        SELECT 'tenant' AS dim, tenant AS value, ts, {metric} FROM requests
        WHERE deployment = {deployment:String} AND tier = {tier:String} AND outcome = 'ok'
          AND ts >= {start:DateTime64(6, 'UTC')} AND ts < {end:DateTime64(6, 'UTC')}
        UNION ALL
        SELECT 'route', route, ts, {metric} FROM requests
        WHERE deployment = {deployment:String} AND tier = {tier:String} AND outcome = 'ok'
          AND ts >= {start:DateTime64(6, 'UTC')} AND ts < {end:DateTime64(6, 'UTC')}
    )
    GROUP BY ALL
)
SELECT dim, value, quantileExactInclusiveIf(0.5)(p95, bucket < {at:DateTime64(6, 'UTC')}) AS before,
    quantileExactInclusiveIf(0.5)(p95, bucket >= {at:DateTime64(6, 'UTC')}) AS after, count() AS buckets
FROM b GROUP BY ALL
