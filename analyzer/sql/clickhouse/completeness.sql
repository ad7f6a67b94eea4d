-- How far the store is complete, per deployment (analyzer/sql/completeness.sql): in flight are the requests whose
-- early spans (gateway, queue) are stored without their root. {deployment} NULL = every one; {abandoned_s}.
WITH __requests__,
newest_done AS (
    SELECT deployment, max(end_ns) AS newest_completion_ns
    FROM requests WHERE {deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)}
    GROUP BY deployment
), done AS (   -- the longest request among those that finished in the hour before the newest completion
    SELECT deployment, any(d.newest_completion_ns) AS newest_completion_ns, max(r.e2e_s) AS longest_s
    FROM requests r JOIN newest_done d USING (deployment)
    WHERE r.end_ns >= d.newest_completion_ns - 3600000000000 GROUP BY deployment
), newest AS (
    SELECT greatest(coalesce(a, b), coalesce(b, a)) AS ns
    FROM (SELECT (SELECT maxOrNull(end_ns) FROM requests) AS a,
                 (SELECT maxOrNull(greatest(gateway_end, coalesce(queue_end, gateway_end))) FROM in_flight) AS b)
), open AS (   -- in flight for longer than {abandoned_s}: abandoned, not waited for
    SELECT deployment,
        countIf(gateway_start >= (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9) AS in_flight,
        minIfOrNull(gateway_start, gateway_start >= (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9)
            AS oldest_arrival_ns,
        countIf(gateway_start < (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9) AS abandoned
    FROM in_flight WHERE {deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)}
    GROUP BY deployment
)
SELECT deployment, d.newest_completion_ns, d.longest_s, coalesce(o.in_flight, 0) AS in_flight, o.oldest_arrival_ns,
    coalesce(o.abandoned, 0) AS abandoned, deployment IN (SELECT deployment FROM admission_spans) AS early_spans,
    (SELECT ns FROM newest) AS newest_data_ns
FROM done d FULL JOIN open o USING (deployment)
ORDER BY deployment
