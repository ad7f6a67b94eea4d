-- Which tenants and routes moved across each change point (goodput/analyzer/sql/tenant_route_shift.sql): the change points as
-- parallel arrays {ids}, {deployments}, {tiers}, {metrics}, {ats}, {starts}, {ends}; {bucket} seconds.
-- The requests stream through the join and the change points are its build side (ClickHouse hashes the right one:
-- with the requests there, a window of 17M requests, 100M spans, needed more than 4 GB); only the requests of a
-- change point's deployment, tier and time span reach it.
WITH __requests__,
cp AS (
    SELECT c.1 AS id, c.2 AS deployment, c.3 AS tier, c.4 AS metric, c.5 AS cp_at, c.6 AS start_ts, c.7 AS end_ts
    FROM (SELECT arrayJoin(arrayZip({ids:Array(Int64)}, {deployments:Array(String)}, {tiers:Array(String)},
                                    {metrics:Array(String)}, {ats:Array(DateTime64(6, 'UTC'))}, {starts:Array(DateTime64(6, 'UTC'))},
                                    {ends:Array(DateTime64(6, 'UTC'))})) AS c)
), r AS (
    SELECT c.id AS id, c.cp_at AS cp_at, q.tenant AS tenant, q.route AS route, q.ts AS ts,
        multiIf(c.metric = 'e2e_s', q.e2e_s, c.metric = 'ttft_s', q.ttft_s, c.metric = 'tpot_s', q.tpot_s,
                c.metric = 'gateway_s', q.gateway_s, c.metric = 'queue_s', q.queue_s, c.metric = 'prefill_s', q.prefill_s,
                c.metric = 'kv_transfer_s', q.kv_transfer_s,
                c.metric = 'decode_s', q.decode_s, c.metric = 'send_s', q.send_s, NULL) AS v
    FROM (SELECT deployment, tier, tenant, route, ts, e2e_s, ttft_s, tpot_s, gateway_s, queue_s, prefill_s,
                 kv_transfer_s, decode_s, send_s
          FROM requests
          WHERE outcome = 'ok' AND (deployment, tier) IN (SELECT deployment, tier FROM cp)
            AND ts >= arrayMin({starts:Array(DateTime64(6, 'UTC'))}) AND ts < arrayMax({ends:Array(DateTime64(6, 'UTC'))})) q
    JOIN cp c ON q.deployment = c.deployment AND q.tier = c.tier
    WHERE q.ts >= c.start_ts AND q.ts < c.end_ts
), b AS (   -- each row of r twice, once per dimension
    SELECT id, any(cp_at) AS cp_at, dim, value,
        fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000,
            toInt64({bucket:Float64} * 1e6)) * toInt64({bucket:Float64} * 1e6), 'UTC') AS bucket,
        quantileExactInclusive(0.95)(v) AS p95
    FROM r ARRAY JOIN ['tenant', 'route'] AS dim, [tenant, route] AS value
    GROUP BY id, dim, value, bucket
)
SELECT id, dim, value, quantileExactInclusiveIf(0.5)(p95, bucket < cp_at) AS before,
    quantileExactInclusiveIf(0.5)(p95, bucket >= cp_at) AS after, count() AS buckets
FROM b GROUP BY id, dim, value
ORDER BY id, dim, value
