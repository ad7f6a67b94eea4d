-- For each change point, the latest release of its deployment (or of every deployment, '*') at or before
-- the end of the bucket where the change shows, within $window before the change point.
SELECT c.id, r.time AS release_time, r.kind, r.from_version, r.to_version, r.note
FROM change_points c
ASOF LEFT JOIN (
    SELECT time, deployment, kind, from_version, to_version, note FROM releases WHERE deployment <> '*'
    UNION ALL
    SELECT r.time, d.deployment, r.kind, r.from_version, r.to_version, r.note
    FROM releases r CROSS JOIN (SELECT DISTINCT deployment FROM change_points) d WHERE r.deployment = '*'
) r ON c.deployment = r.deployment AND c.bucket_end >= r.time
WHERE r.time IS NULL OR r.time >= c.ts - $window
ORDER BY c.id;
