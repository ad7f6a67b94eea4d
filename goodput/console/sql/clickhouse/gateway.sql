-- Per tenant and tier: what the gateway decided for the requests the filters select (goodput/console/sql/gateway.sql).
WITH __requests__
SELECT tenant, tier, if(refused, 'rejected', 'admitted') AS decision, if(refused, reject_reason, NULL) AS reason,
    count() AS requests
FROM (
    SELECT *, replica IS NULL AND has({reasons:Array(String)}, assumeNotNull(reject_reason)) AS refused
    FROM ({filtered})
)
GROUP BY tenant, tier, decision, reason ORDER BY tenant, tier, decision, reason
