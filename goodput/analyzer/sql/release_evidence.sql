-- What moved across one release of one deployment: requests arriving in the $before_s seconds before $at against those
-- arriving from $at to $until. Per-token prefill and decode cost and request lengths ($deployment, $at, $since, $until).
SELECT CASE WHEN ts >= $at THEN 'after' ELSE 'before' END AS period,
    count(*) FILTER (WHERE outcome = 'ok') AS ok,
    avg(input_tokens) AS input_tokens, avg(output_tokens) FILTER (WHERE outcome = 'ok') AS output_tokens,
    avg(prefill_s / greatest(input_tokens - coalesce(cached_tokens, 0), 1)) FILTER (WHERE outcome = 'ok') AS prefill_s_per_token,
    avg(decode_s / (output_tokens - 1)) FILTER (WHERE outcome = 'ok' AND output_tokens > 1) AS decode_s_per_token
FROM requests
WHERE deployment = $deployment AND ts >= $at - to_seconds($before_s)
  AND ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
GROUP BY period;
