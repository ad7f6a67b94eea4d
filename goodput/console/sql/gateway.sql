-- Per tenant and tier: what the gateway decided for the requests the filters select — refused, by reason (a
-- gateway reason and never routed to a replica; $reasons: goodput/simulator/admission.py), or admitted.
SELECT tenant, tier,
    CASE WHEN replica IS NULL AND list_contains($reasons, reject_reason) THEN 'rejected' ELSE 'admitted' END AS decision,
    CASE WHEN replica IS NULL AND list_contains($reasons, reject_reason) THEN reject_reason END AS reason,
    count(*) AS requests
FROM ({filtered})
GROUP BY ALL ORDER BY tenant, tier, decision, reason;
