-- Now against before (goodput/console/sql/shift.sql): {split} onwards against what came before it.
WITH __requests__
SELECT if(ts >= {split:DateTime64(6, 'UTC')}, 'now', 'before') AS period,
    count() AS requests,
    (toUnixTimestamp64Micro(max(ts)) - toUnixTimestamp64Micro(min(ts))) / 1e6 AS seconds,
    avg(input_tokens) AS input_mean, quantileExactInclusive(0.5)(input_tokens) AS input_p50,
    quantileExactInclusive(0.95)(input_tokens) AS input_p95,
    avg(output_tokens) AS output_mean, quantileExactInclusive(0.5)(output_tokens) AS output_p50,
    quantileExactInclusive(0.95)(output_tokens) AS output_p95
FROM ({filtered})
GROUP BY period ORDER BY period
