-- Per deployment, tier and time bucket: p95 of every latency metric, mean segments, workload and per-token cost
-- (goodput/analyzer/sql/bucket_series.sql). {bucket_us}: the bucket in microseconds.
WITH __requests__
SELECT deployment, tier, fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000, {bucket_us:Int64}) * {bucket_us:Int64}, 'UTC') AS bucket,
    count() AS arrivals,
    countIf(outcome = 'ok') AS ok,
    quantileExactInclusiveIf(0.95)(e2e_s, outcome = 'ok') AS e2e_s,
    quantileExactInclusiveIf(0.95)(ttft_s, outcome = 'ok') AS ttft_s,
    quantileExactInclusiveIf(0.95)(tpot_s, outcome = 'ok') AS tpot_s,
    quantileExactInclusiveIf(0.95)(gateway_s, outcome = 'ok') AS gateway_s,
    quantileExactInclusiveIf(0.95)(queue_s, outcome = 'ok') AS queue_s,
    quantileExactInclusiveIf(0.95)(prefill_s, outcome = 'ok') AS prefill_s,
    quantileExactInclusiveIf(0.95)(kv_transfer_s, outcome = 'ok') AS kv_transfer_s,
    quantileExactInclusiveIf(0.95)(decode_s, outcome = 'ok') AS decode_s,
    quantileExactInclusiveIf(0.95)(send_s, outcome = 'ok') AS send_s,
    avgIfOrNull(gateway_s, outcome = 'ok') AS mean_gateway_s, avgIfOrNull(queue_s, outcome = 'ok') AS mean_queue_s,
    avgIfOrNull(prefill_s, outcome = 'ok') AS mean_prefill_s,
    avgIfOrNull(kv_transfer_s, outcome = 'ok') AS mean_kv_transfer_s, avgIfOrNull(decode_s, outcome = 'ok') AS mean_decode_s,
    avgIfOrNull(send_s, outcome = 'ok') AS mean_send_s,
    avgOrNull(input_tokens) AS input_tokens, avgIfOrNull(output_tokens, outcome = 'ok') AS output_tokens,
    avgIfOrNull(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1), outcome = 'ok') AS prefill_s_per_token,
    avgIfOrNull(decode_s / (output_tokens - 1), outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token,
    avgIfOrNull(kv_transfer_s / greatest(input_tokens, 1), outcome = 'ok') AS kv_transfer_s_per_token
FROM requests
WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
  AND ({deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)})
GROUP BY ALL
ORDER BY deployment, tier, bucket
