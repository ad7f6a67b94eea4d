-- Input lengths before and after {split}, for the histogram (goodput/console/sql/lengths.sql): a sample of 20,000, chosen
-- by a hash of the request (ClickHouse samples only a table made with SAMPLE BY; under 20,000, all of them).
WITH __requests__
SELECT if(ts >= {split:DateTime64(6, 'UTC')}, 'now', 'before') AS period, input_tokens, output_tokens
FROM ({filtered})
ORDER BY cityHash64(trace_id, coalesce(request_id, '')) LIMIT 20000
