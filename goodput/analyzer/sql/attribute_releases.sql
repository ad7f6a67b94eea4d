-- For each change point, every release (or scale event) of its deployment (or of every deployment, '*') at or before
-- the end of the bucket where the change shows and within $window before the change point, the latest first: the
-- evidence decides which of them, if any, explains the change (goodput/analyzer/regressions.py).
SELECT c.id, r.time AS release_time, r.kind, r.from_version, r.to_version, r.note
FROM change_points c
JOIN (
    SELECT time, deployment, kind, from_version, to_version, note FROM releases WHERE deployment <> '*'
    UNION ALL
    SELECT r.time, d.deployment, r.kind, r.from_version, r.to_version, r.note
    FROM releases r CROSS JOIN (SELECT DISTINCT deployment FROM change_points) d WHERE r.deployment = '*'
) r ON c.deployment = r.deployment AND r.time <= c.bucket_end AND r.time >= c.ts - $window
ORDER BY c.id, r.time DESC;
