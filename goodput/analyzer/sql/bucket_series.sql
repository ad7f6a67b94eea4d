-- Per deployment, tier and time bucket: p95 of every latency metric, mean segment seconds, workload
-- (requests, mean input and output tokens) and per-token cost. $bucket is an interval.
SELECT deployment, tier, time_bucket($bucket, ts) AS bucket,
    count(*) AS arrivals,
    count(*) FILTER (WHERE outcome = 'ok') AS ok,
    quantile_cont(e2e_s, 0.95) FILTER (WHERE outcome = 'ok') AS e2e_s,
    quantile_cont(ttft_s, 0.95) FILTER (WHERE outcome = 'ok') AS ttft_s,
    quantile_cont(tpot_s, 0.95) FILTER (WHERE outcome = 'ok') AS tpot_s,
    quantile_cont(gateway_s, 0.95) FILTER (WHERE outcome = 'ok') AS gateway_s,
    quantile_cont(queue_s, 0.95) FILTER (WHERE outcome = 'ok') AS queue_s,
    quantile_cont(prefill_s, 0.95) FILTER (WHERE outcome = 'ok') AS prefill_s,
    quantile_cont(kv_transfer_s, 0.95) FILTER (WHERE outcome = 'ok') AS kv_transfer_s,
    quantile_cont(decode_s, 0.95) FILTER (WHERE outcome = 'ok') AS decode_s,
    quantile_cont(send_s, 0.95) FILTER (WHERE outcome = 'ok') AS send_s,
    avg(gateway_s) FILTER (WHERE outcome = 'ok') AS mean_gateway_s, avg(queue_s) FILTER (WHERE outcome = 'ok') AS mean_queue_s,
    avg(prefill_s) FILTER (WHERE outcome = 'ok') AS mean_prefill_s,
    avg(kv_transfer_s) FILTER (WHERE outcome = 'ok') AS mean_kv_transfer_s, avg(decode_s) FILTER (WHERE outcome = 'ok') AS mean_decode_s,
    avg(send_s) FILTER (WHERE outcome = 'ok') AS mean_send_s,
    avg(input_tokens) AS input_tokens, avg(output_tokens) FILTER (WHERE outcome = 'ok') AS output_tokens,
    avg(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1)) FILTER (WHERE outcome = 'ok') AS prefill_s_per_token,
    avg(decode_s / (output_tokens - 1)) FILTER (WHERE outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token,
    -- the KV cache moved is the prompt's: seconds per prompt token is the link's cost (bytes per token are the model's)
    avg(kv_transfer_s / greatest(input_tokens, 1)) FILTER (WHERE outcome = 'ok') AS kv_transfer_s_per_token
FROM requests
WHERE ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
  AND ($deployment IS NULL OR deployment = $deployment)
GROUP BY ALL
ORDER BY deployment, tier, bucket;
