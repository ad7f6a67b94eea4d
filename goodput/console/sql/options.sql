-- The values the sidebar offers for each filter.
SELECT 'deployment' AS dim, deployment AS value FROM requests WHERE deployment IS NOT NULL GROUP BY ALL
UNION ALL SELECT 'tier', tier FROM requests WHERE tier IS NOT NULL GROUP BY ALL
UNION ALL SELECT 'tenant', tenant FROM requests WHERE tenant IS NOT NULL GROUP BY ALL
ORDER BY dim, value;
