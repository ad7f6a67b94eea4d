-- One staging table per ingest run, in the trace store's span schema.
CREATE OR REPLACE TEMP TABLE staged (
    trace_id VARCHAR, span_id VARCHAR, parent_span_id VARCHAR, name VARCHAR, kind TINYINT,
    start_time_unix_nano BIGINT, end_time_unix_nano BIGINT, status_code TINYINT, status_message VARCHAR,
    service_name VARCHAR, attributes MAP(VARCHAR, VARCHAR), resource MAP(VARCHAR, VARCHAR), source VARCHAR
);
