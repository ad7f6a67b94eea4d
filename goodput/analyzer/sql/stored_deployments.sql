-- The deployments the store holds requests of, the busiest first (triage's choice when nothing else decides).
SELECT deployment, count(*) AS n FROM requests GROUP BY ALL ORDER BY n DESC, deployment;
