-- The recent period's requests of one deployment that the gateway refused, per tenant and reason, beside all the
-- period's requests and rejections (goodput/analyzer/sql/gateway_refusals.sql).
WITH __requests__, r AS (
    SELECT * FROM requests
    WHERE deployment = {deployment:String} AND ts >= {split:DateTime64(6, 'UTC')}
      AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
), totals AS (
    SELECT count() AS requests, countIf(reject_reason IS NOT NULL) AS rejected FROM r
)
SELECT g.tenant AS tenant, g.tier AS tier, g.reason AS reason, g.refused AS refused, t.requests AS requests,
    t.rejected AS rejected
FROM (
    SELECT tenant, tier, reject_reason AS reason, count() AS refused FROM r
    WHERE replica IS NULL AND has({reasons:Array(String)}, assumeNotNull(reject_reason))
    GROUP BY tenant, tier, reason
) g CROSS JOIN totals t
ORDER BY refused DESC, tenant, tier, reason
