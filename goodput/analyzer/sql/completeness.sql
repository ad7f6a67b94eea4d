-- How far the store is complete, per deployment ($deployment NULL = every one): its newest completion, the longest
-- request of the hour before it, what is in flight (requests whose early spans came without their root) and the arrival of the
-- oldest, those abandoned (in flight longer than $abandoned_s), whether its gateway spans name it (arrivals counted
-- at admission), and the store's newest data.
WITH newest_done AS (
    SELECT deployment, max(end_ns) AS newest_completion_ns
    FROM requests WHERE $deployment IS NULL OR deployment = $deployment GROUP BY deployment
), done AS (   -- the longest request among those that finished in the hour before the newest completion
    SELECT deployment, any_value(d.newest_completion_ns) AS newest_completion_ns, max(r.e2e_s) AS longest_s
    FROM requests r JOIN newest_done d USING (deployment)
    WHERE r.end_ns >= d.newest_completion_ns - 3600000000000 GROUP BY deployment
), newest AS (
    SELECT greatest((SELECT max(end_ns) FROM requests),
                    (SELECT max(greatest(gateway_end, coalesce(queue_end, gateway_end))) FROM in_flight)) AS ns
), open AS (   -- in flight for longer than $abandoned_s (a fleet that stopped, spans lost): abandoned, not waited for
    SELECT deployment,
        count(*) FILTER (WHERE gateway_start >= (SELECT ns FROM newest) - $abandoned_s * 1e9) AS in_flight,
        min(gateway_start) FILTER (WHERE gateway_start >= (SELECT ns FROM newest) - $abandoned_s * 1e9)
            AS oldest_arrival_ns,
        count(*) FILTER (WHERE gateway_start < (SELECT ns FROM newest) - $abandoned_s * 1e9) AS abandoned
    FROM in_flight WHERE $deployment IS NULL OR deployment = $deployment GROUP BY deployment
)
SELECT deployment, d.newest_completion_ns, d.longest_s, coalesce(o.in_flight, 0) AS in_flight, o.oldest_arrival_ns,
    coalesce(o.abandoned, 0) AS abandoned, a.deployment IS NOT NULL AS early_spans,
    (SELECT ns FROM newest) AS newest_data_ns
FROM done d FULL JOIN open o USING (deployment) LEFT JOIN admission_spans a USING (deployment)
ORDER BY deployment;
