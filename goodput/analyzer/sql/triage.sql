-- Triage facts for one deployment: the recent period (the last quarter of the window) against what came before.
-- $deployment, $since, $until, $split (the time the recent period starts).
WITH r AS (
    SELECT * FROM requests
    WHERE deployment = $deployment AND ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
), periods AS (
    SELECT CASE WHEN ts >= $split THEN 'recent' ELSE 'before' END AS period, * FROM r
)
SELECT period,
    count(*) AS requests,
    (epoch(max(ts)) - epoch(min(ts))) AS seconds,
    count(*) FILTER (WHERE outcome = 'ok') AS ok,
    count(*) FILTER (WHERE outcome = 'rejected') AS rejected,
    count(*) FILTER (WHERE outcome = 'timeout') AS timeouts,
    count(*) FILTER (WHERE outcome = 'error') AS errors,
    count(*) FILTER (WHERE reject_reason = 'kv_capacity') AS kv_rejections,
    avg(input_tokens) AS input_tokens, avg(output_tokens) FILTER (WHERE outcome = 'ok') AS output_tokens,
    sum(coalesce(preemptions, 0)) AS preemptions,
    sum(coalesce(cached_tokens, 0)) / greatest(sum(input_tokens), 1) AS cache_hit_ratio,
    quantile_cont(e2e_s, 0.95) FILTER (WHERE outcome = 'ok') AS e2e_p95,
    quantile_cont(ttft_s, 0.95) FILTER (WHERE outcome = 'ok') AS ttft_p95,
    quantile_cont(queue_s, 0.95) FILTER (WHERE outcome = 'ok') AS queue_p95,
    quantile_cont(kv_transfer_s, 0.95) FILTER (WHERE outcome = 'ok') AS kv_transfer_p95,
    avg(kv_transfer_s / greatest(input_tokens, 1)) FILTER (WHERE outcome = 'ok') AS kv_transfer_s_per_token,
    avg(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1)) FILTER (WHERE outcome = 'ok') AS prefill_s_per_token,
    avg(decode_s / (output_tokens - 1)) FILTER (WHERE outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token,
    max(per_minute) / greatest(avg(per_minute), 1e-9) AS burstiness
FROM periods
JOIN (SELECT period AS p, time_bucket(INTERVAL '1 minute', ts) AS m, count(*) AS per_minute FROM periods GROUP BY ALL) pm
  ON pm.p = periods.period AND pm.m = time_bucket(INTERVAL '1 minute', periods.ts)
GROUP BY period;
