-- Which tenants and routes moved across each change point (analyzer/sql/tenant_route_shift.sql): the change points as
-- parallel arrays {ids}, {deployments}, {tiers}, {metrics}, {ats}, {starts}, {ends}; {bucket} seconds.
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
    FROM cp c JOIN requests q ON q.deployment = c.deployment AND q.tier = c.tier
    WHERE q.outcome = 'ok' AND q.ts >= c.start_ts AND q.ts < c.end_ts
), b AS (
    SELECT id, any(cp_at) AS cp_at, dim, value,
        fromUnixTimestamp64Micro(946857600000000 + intDiv(toUnixTimestamp64Micro(ts) - 946857600000000,
            toInt64({bucket:Float64} * 1e6)) * toInt64({bucket:Float64} * 1e6), 'UTC') AS bucket,
        quantileExactInclusive(0.95)(v) AS p95
    FROM (SELECT id, cp_at, 'tenant' AS dim, tenant AS value, ts, v FROM r
          UNION ALL
          SELECT id, cp_at, 'route' AS dim, route AS value, ts, v FROM r)
    GROUP BY id, dim, value, bucket
)
SELECT id, dim, value, quantileExactInclusiveIf(0.5)(p95, bucket < cp_at) AS before,
    quantileExactInclusiveIf(0.5)(p95, bucket >= cp_at) AS after, count() AS buckets
FROM b GROUP BY id, dim, value
ORDER BY id, dim, value
