-- How far the store is complete, per deployment (goodput/analyzer/sql/completeness.sql): in flight are the requests whose
-- early spans (gateway, queue) are stored without their root (in flight longer than {abandoned_s}: abandoned, not
-- waited for). {deployment} NULL = every one.
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
                 (SELECT maxOrNull(greatest(gateway_end, coalesce(queue_end, gateway_end))) FROM early_only) AS b)
), joined AS (   -- done and the requests in flight in one relation: no join (chDB's join with an empty side
                --   of this statement gave rows that were not there)
    SELECT deployment, newest_completion_ns, longest_s, CAST(NULL AS Nullable(Int64)) AS g FROM done
    UNION ALL
    SELECT deployment, NULL, NULL, gateway_start FROM early_only
    WHERE {deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)}
)
SELECT deployment, anyOrNull(newest_completion_ns) AS newest_completion_ns, anyOrNull(longest_s) AS longest_s,
    countIf(g >= (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9) AS in_flight,
    minIfOrNull(g, g >= (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9) AS oldest_arrival_ns,
    countIf(g < (SELECT ns FROM newest) - {abandoned_s:Float64} * 1e9) AS abandoned,
    deployment IN (SELECT deployment FROM admission_spans) AS early_spans,
    (SELECT ns FROM newest) AS newest_data_ns
FROM joined
GROUP BY deployment
ORDER BY deployment
