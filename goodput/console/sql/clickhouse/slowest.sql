-- The slowest requests the filters select, with their segments (goodput/console/sql/slowest.sql).
WITH __requests__
SELECT trace_id, request_id, ts, deployment, replica, tenant, tier, route, outcome, input_tokens, output_tokens,
    e2e_s, ttft_s, gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s, other_s, preemptions, retries,
    prefill_replica
FROM ({filtered})
ORDER BY e2e_s DESC NULLS LAST
LIMIT {limit:UInt64}
