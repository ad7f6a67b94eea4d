-- Arrivals and request lengths per time bucket ($bucket an interval).
SELECT time_bucket($bucket, ts) AS bucket,
    count(*) AS arrivals,
    quantile_cont(input_tokens, 0.5) AS input_p50, quantile_cont(input_tokens, 0.95) AS input_p95,
    quantile_cont(output_tokens, 0.5) AS output_p50, quantile_cont(output_tokens, 0.95) AS output_p95,
    avg(input_tokens) AS input_mean, avg(output_tokens) AS output_mean
FROM ({filtered})
GROUP BY ALL ORDER BY bucket;
