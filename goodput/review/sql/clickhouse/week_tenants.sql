-- The reviewed week's requests and tokens per deployment, tier and tenant from the Collector's otel_traces
-- (goodput/review/sql/week_tenants.sql): totals, not series.
WITH __requests__
SELECT deployment, tier, coalesce(tenant, 'unknown') AS tenant, count() AS requests,
       sumIf(coalesce(input_tokens, 0), outcome <> 'rejected') + sumIf(coalesce(output_tokens, 0), outcome = 'ok')
           AS tokens
FROM requests
WHERE ts >= {since:DateTime64(6, 'UTC')} AND ts < {until:DateTime64(6, 'UTC')}
GROUP BY deployment, tier, tenant
