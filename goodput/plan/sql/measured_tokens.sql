-- Measured demand: token quantiles and means over [$start, $end) per deployment, scene and tier, as the gateway
-- counts them: input tokens of admitted requests, output tokens of completed ones (a timeout's are cut short).
SELECT coalesce(deployment, 'unknown') AS deployment, coalesce(scene, route, 'unknown') AS scene,
       coalesce(tier, 'unknown') AS tier,
       quantile_cont(greatest(input_tokens, 1), [0.5, 0.9, 0.95, 0.99]) FILTER (WHERE outcome <> 'rejected') AS input_q,
       max(greatest(input_tokens, 1)) FILTER (WHERE outcome <> 'rejected') AS input_max,
       avg(input_tokens) FILTER (WHERE outcome <> 'rejected') AS input_mean,
       quantile_cont(greatest(output_tokens, 1), [0.5, 0.9, 0.95, 0.99]) FILTER (WHERE outcome = 'ok') AS output_q,
       max(greatest(output_tokens, 1)) FILTER (WHERE outcome = 'ok') AS output_max,
       avg(output_tokens) FILTER (WHERE outcome = 'ok') AS output_mean
FROM requests
WHERE ts >= $start AND ts < $end AND input_tokens IS NOT NULL
GROUP BY ALL
