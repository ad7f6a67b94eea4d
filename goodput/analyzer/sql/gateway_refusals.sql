-- Triage step 4: the recent period's requests of one deployment that the gateway refused (a gateway reason, never
-- routed to a replica), per tenant and reason, beside all the period's requests and all its rejections.
-- $deployment, $split, $until, $reasons (the gateway's reject reasons, goodput/simulator/admission.py).
WITH r AS (
    SELECT * FROM requests WHERE deployment = $deployment AND ts >= $split AND ($until IS NULL OR ts < $until)
), totals AS (
    SELECT count(*) AS requests, count(*) FILTER (WHERE reject_reason IS NOT NULL) AS rejected FROM r
)
SELECT g.tenant, g.tier, g.reason, g.refused, t.requests, t.rejected
FROM (
    SELECT tenant, tier, reject_reason AS reason, count(*) AS refused FROM r
    WHERE replica IS NULL AND list_contains($reasons, reject_reason)
    GROUP BY ALL
) g CROSS JOIN totals t
ORDER BY g.refused DESC, g.tenant, g.tier, g.reason;
