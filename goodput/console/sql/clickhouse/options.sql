-- The values the sidebar offers for each filter (goodput/console/sql/options.sql).
WITH __requests__
SELECT dim, value FROM (
    SELECT 'deployment' AS dim, deployment AS value FROM requests WHERE deployment IS NOT NULL GROUP BY value
    UNION ALL SELECT 'tier' AS dim, tier AS value FROM requests WHERE tier IS NOT NULL GROUP BY value
    UNION ALL SELECT 'tenant' AS dim, tenant AS value FROM requests WHERE tenant IS NOT NULL GROUP BY value
)
ORDER BY dim, value
