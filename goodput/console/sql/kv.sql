-- Preemptions and KV-capacity rejections per time bucket, from the traces.
SELECT time_bucket($bucket, ts) AS bucket, deployment,
    count(*) AS requests,
    sum(coalesce(preemptions, 0)) AS preemptions,
    count(*) FILTER (WHERE reject_reason = 'kv_capacity') AS kv_rejections,
    count(*) FILTER (WHERE outcome = 'rejected') AS rejected
FROM ({filtered})
GROUP BY ALL ORDER BY bucket, deployment;
