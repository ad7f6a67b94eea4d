-- The spans of otel_traces per hour: the backfill's chunks.
SELECT toUnixTimestamp64Nano(toDateTime64(toStartOfHour(Timestamp), 9, 'UTC')) AS hour_ns, count() AS spans
FROM __db__.__table__ GROUP BY hour_ns ORDER BY hour_ns
