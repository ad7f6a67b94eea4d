-- Triage step 4: the recent period's requests per tier that the gateway's overload ladder degraded on this deployment
-- (action degraded, detail the step), that fell back to it from their primary (fallback_in, detail the primary) and
-- that fell back away from it to a backup (fallback_out, detail the backup), by reason; beside each tier's traffic
-- here: the requests served on it and those that left it. $deployment, $split, $until.
WITH r AS (
    SELECT tier, deployment, degraded, fallback_from, fallback_reason FROM requests
    WHERE (deployment = $deployment OR fallback_from = $deployment) AND ts >= $split AND ($until IS NULL OR ts < $until)
), tiers AS (
    SELECT tier, count(*) AS requests FROM r GROUP BY tier
)
SELECT a.tier, a.action, a.detail, a.reason, a.n, t.requests
FROM (
    SELECT tier, 'degraded' AS action, degraded AS detail, NULL::VARCHAR AS reason, count(*) AS n FROM r
    WHERE deployment = $deployment AND degraded IS NOT NULL GROUP BY ALL
    UNION ALL
    SELECT tier, 'fallback_in', fallback_from, fallback_reason, count(*) FROM r
    WHERE deployment = $deployment AND fallback_from IS NOT NULL AND fallback_from <> $deployment GROUP BY ALL
    UNION ALL
    SELECT tier, 'fallback_out', deployment, fallback_reason, count(*) FROM r
    WHERE fallback_from = $deployment AND deployment <> $deployment GROUP BY ALL
) a JOIN tiers t USING (tier)
ORDER BY a.n DESC, a.tier, a.action, a.detail, a.reason;
