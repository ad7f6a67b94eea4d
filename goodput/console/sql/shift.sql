-- Now against before: $split onwards against what came before it ($since on: the console passes like windows).
SELECT CASE WHEN ts >= $split THEN 'now' ELSE 'before' END AS period,
    count(*) AS requests,
    epoch(max(ts)) - epoch(min(ts)) AS seconds,
    avg(input_tokens) AS input_mean, quantile_cont(input_tokens, 0.5) AS input_p50,
    quantile_cont(input_tokens, 0.95) AS input_p95,
    avg(output_tokens) AS output_mean, quantile_cont(output_tokens, 0.5) AS output_p50,
    quantile_cont(output_tokens, 0.95) AS output_p95
FROM ({filtered})
GROUP BY ALL ORDER BY period;
