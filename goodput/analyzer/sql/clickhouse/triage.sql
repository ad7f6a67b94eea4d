-- Triage facts for one deployment: goodput/analyzer/sql/triage.sql in ClickHouse's dialect.
-- {deployment}, {since}, {until} (NULL = open), {split} (the time the recent period starts).
WITH __requests__,
r AS (
    SELECT * FROM requests
    WHERE deployment = {deployment:String}
      AND ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
      AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
), periods AS (
    SELECT if(ts >= {split:DateTime64(6, 'UTC')}, 'recent', 'before') AS period, * FROM r
), pm AS (
    SELECT period AS p, toStartOfMinute(ts) AS m, count() AS per_minute FROM periods GROUP BY ALL
)
SELECT period,
    count() AS requests,
    (toUnixTimestamp64Micro(max(ts)) - toUnixTimestamp64Micro(min(ts))) / 1e6 AS seconds,
    countIf(outcome = 'ok') AS ok,
    countIf(outcome = 'rejected') AS rejected,
    countIf(outcome = 'timeout') AS timeouts,
    countIf(outcome = 'error') AS errors,
    countIf(reject_reason = 'kv_capacity') AS kv_rejections,
    avgOrNull(input_tokens) AS input_tokens, avgIfOrNull(output_tokens, outcome = 'ok') AS output_tokens,
    sum(coalesce(preemptions, 0)) AS preemptions,
    sum(coalesce(cached_tokens, 0)) / greatest(sum(input_tokens), 1) AS cache_hit_ratio,
    quantileExactInclusiveIf(0.95)(e2e_s, outcome = 'ok') AS e2e_p95,
    quantileExactInclusiveIf(0.95)(ttft_s, outcome = 'ok') AS ttft_p95,
    quantileExactInclusiveIf(0.95)(queue_s, outcome = 'ok') AS queue_p95,
    quantileExactInclusiveIf(0.95)(kv_transfer_s, outcome = 'ok') AS kv_transfer_p95,
    avgIfOrNull(kv_transfer_s / greatest(input_tokens, 1), outcome = 'ok') AS kv_transfer_s_per_token,
    avgIfOrNull(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1), outcome = 'ok') AS prefill_s_per_token,
    avgIfOrNull(decode_s / (output_tokens - 1), outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token,
    max(per_minute) / greatest(avg(per_minute), 1e-9) AS burstiness
FROM periods JOIN pm ON pm.p = periods.period AND pm.m = toStartOfMinute(periods.ts)
GROUP BY period
