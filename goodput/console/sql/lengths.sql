-- Input lengths before and after $split, for the histogram (a sample of 20,000).
SELECT CASE WHEN ts >= $split THEN 'now' ELSE 'before' END AS period, input_tokens, output_tokens
FROM ({filtered})
USING SAMPLE reservoir(20000 ROWS) REPEATABLE (7);
