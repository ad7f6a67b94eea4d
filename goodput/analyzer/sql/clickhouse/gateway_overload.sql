-- The recent period's requests per tier the overload ladder degraded, that fell back to this deployment and that
-- fell back away from it, beside each tier's traffic here (goodput/analyzer/sql/gateway_overload.sql).
WITH __requests__, r AS (
    SELECT tier, deployment, degraded, fallback_from, fallback_reason FROM requests
    WHERE (deployment = {deployment:String} OR fallback_from = {deployment:String})
      AND ts >= {split:DateTime64(6, 'UTC')}
      AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))})
), tiers AS (
    SELECT tier, count() AS requests FROM r GROUP BY tier
)
SELECT a.tier AS tier, a.action AS action, a.detail AS detail, a.reason AS reason, a.n AS n, t.requests AS requests
FROM (
    SELECT tier, 'degraded' AS action, degraded AS detail, CAST(NULL AS Nullable(String)) AS reason, count() AS n
    FROM r WHERE deployment = {deployment:String} AND degraded IS NOT NULL GROUP BY tier, detail
    UNION ALL
    SELECT tier, 'fallback_in', fallback_from, fallback_reason, count() FROM r
    WHERE deployment = {deployment:String} AND fallback_from IS NOT NULL AND fallback_from != {deployment:String}
    GROUP BY tier, fallback_from, fallback_reason
    UNION ALL
    SELECT tier, 'fallback_out', CAST(deployment AS Nullable(String)), fallback_reason, count() FROM r
    WHERE fallback_from = {deployment:String} AND deployment != {deployment:String}
    GROUP BY tier, deployment, fallback_reason
) a JOIN tiers t ON t.tier = a.tier
ORDER BY n DESC, tier, action, detail, reason
