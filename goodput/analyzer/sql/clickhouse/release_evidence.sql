-- What moved across one release of one deployment (goodput/analyzer/sql/release_evidence.sql): {before_s} seconds before
-- {at} against {at} to {until}.
WITH __requests__
SELECT if(ts >= {at:DateTime64(6, 'UTC')}, 'after', 'before') AS period,
    countIf(outcome = 'ok') AS ok,
    avgOrNull(input_tokens) AS input_tokens, avgIfOrNull(output_tokens, outcome = 'ok') AS output_tokens,
    avgIfOrNull(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1), outcome = 'ok') AS prefill_s_per_token,
    avgIfOrNull(decode_s / (output_tokens - 1), outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token
FROM requests
WHERE deployment = {deployment:String}
  AND toUnixTimestamp64Micro(ts) >= toUnixTimestamp64Micro({at:DateTime64(6, 'UTC')}) - {before_s:Float64} * 1e6
  AND ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
  AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
GROUP BY period
