-- Arrivals per bucket ($bucket an interval) and deployment, by arrival time: finished requests and those in flight
-- (their llm.gateway span came, their root not yet). $since, $until, $deployment, $tier, $tenant: NULL = any.
SELECT time_bucket($bucket::INTERVAL, ts) AS bucket, deployment,
    count(*) AS arrivals, count(*) FILTER (WHERE open) AS in_flight
FROM (
    SELECT ts, deployment, tier, tenant, false AS open FROM requests
    UNION ALL
    SELECT make_timestamptz(gateway_start // 1000), deployment, tier, tenant, true FROM in_flight
)
WHERE ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until)
  AND ($deployment IS NULL OR deployment = $deployment)
  AND ($tier IS NULL OR tier = $tier)
  AND ($tenant IS NULL OR tenant = $tenant)
GROUP BY ALL ORDER BY bucket, deployment;
