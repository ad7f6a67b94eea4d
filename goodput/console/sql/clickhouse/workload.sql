-- Arrivals and request lengths per time bucket (goodput/console/sql/workload.sql); {bucket_us} as in kv.sql.
WITH __requests__
SELECT fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000, {bucket_us:Int64}) * {bucket_us:Int64}, 'UTC') AS bucket,
    count() AS arrivals,
    quantileExactInclusive(0.5)(input_tokens) AS input_p50, quantileExactInclusive(0.95)(input_tokens) AS input_p95,
    quantileExactInclusive(0.5)(output_tokens) AS output_p50, quantileExactInclusive(0.95)(output_tokens) AS output_p95,
    avg(input_tokens) AS input_mean, avg(output_tokens) AS output_mean
FROM ({filtered})
GROUP BY bucket ORDER BY bucket
