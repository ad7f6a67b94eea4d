-- Requests in flight: goodput's segment spans that end early (llm.gateway at admission, llm.queue at scheduling),
-- folded per (trace, root span), whose root has not arrived; each becomes a request when it does. The gateway
-- span names the deployment, tenant, tier, route, model and request id. Also the shape of staged_kids.
CREATE TABLE IF NOT EXISTS in_flight (
    trace_id VARCHAR, parent_span_id VARCHAR, source VARCHAR, spans BIGINT,
    gateway_start BIGINT, gateway_end BIGINT, queue_start BIGINT, queue_end BIGINT, prefill_start BIGINT,
    prefill_end BIGINT, decode_start BIGINT, decode_end BIGINT, send_start BIGINT, send_end BIGINT,
    deployment VARCHAR, model VARCHAR, tenant VARCHAR, tier VARCHAR, route VARCHAR, request_id VARCHAR,
    kv_transfer_start BIGINT, kv_transfer_end BIGINT, prefill_replica VARCHAR   -- llm.kv_transfer (P/D)
);
-- databases made before the columns (last, as staging inserts by position)
ALTER TABLE in_flight ADD COLUMN IF NOT EXISTS kv_transfer_start BIGINT;
ALTER TABLE in_flight ADD COLUMN IF NOT EXISTS kv_transfer_end BIGINT;
ALTER TABLE in_flight ADD COLUMN IF NOT EXISTS prefill_replica VARCHAR;
-- Deployments whose gateway spans name them (or ingested from a simulator run's record, which holds every request
-- it made): their arrivals are all counted and what is in flight is in `in_flight` (goodput/analyzer/completeness.py); for
-- the others the store sees a request only once it finished.
CREATE TABLE IF NOT EXISTS admission_spans (deployment VARCHAR PRIMARY KEY, first_ns BIGINT);
