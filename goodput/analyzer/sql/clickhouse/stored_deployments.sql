-- The deployments the store holds requests of, the busiest first (goodput/analyzer/sql/stored_deployments.sql).
WITH __requests__
SELECT deployment, count() AS n FROM requests GROUP BY ALL ORDER BY n DESC, deployment
