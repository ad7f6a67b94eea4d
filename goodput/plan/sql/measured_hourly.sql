-- Measured demand: requests per second in each hour of [$start, $end) per deployment, scene (the route where a
-- request names no scene) and tier. Every request counts, rejected and timed-out ones too: demand, not what was
-- served. Hours are bucketed on the epoch (time-zone free) and named by their end, as Prometheus' increase[1h] is.
SELECT coalesce(deployment, 'unknown') AS deployment, coalesce(scene, route, 'unknown') AS scene,
       coalesce(tier, 'unknown') AS tier,
       floor(epoch(ts) / 3600) * 3600 + 3600 AS hour_end,
       count(*) / 3600.0 AS rps
FROM requests
WHERE ts >= $start AND ts < $end
GROUP BY ALL
