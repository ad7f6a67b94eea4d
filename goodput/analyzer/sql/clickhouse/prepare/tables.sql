-- The tables `goodput analyze prepare` makes beside the Collector's otel_traces (goodput/analyzer/prepare.py fills the
-- __names__, each a checked identifier; __on_cluster__ and the engines' Replicated prefix on a cluster). Their columns
-- come from the statements that fill them (EMPTY AS SELECT), so they cannot drift from spans.sql and model.sql.
-- goodput_spans: spans.sql's narrow rows, by trace (a touched trace's stored spans are read by its id; a span the
-- backfill and a view both stored is one row once merged, and the model reads each span once);
-- the model tables' rows are written by the backfill and the sync (goodput/analyzer/prepare.py), never by a view:
-- goodput_requests: model.sql's requests, one row per engine span, the newest version (spans of the trace seen) kept;
-- goodput_early: every request's early spans, `open` until its root or a later segment is stored;
-- goodput_admission: the deployments, per day, whose gateway writes early spans;
-- goodput_touched: per insert, the traces it touched (by insert time: what the next sync recomputes).
CREATE TABLE IF NOT EXISTS __db__.__spans__ __on_cluster__
ENGINE = __replicated__ReplacingMergeTree
PARTITION BY toDate(fromUnixTimestamp64Nano(start_ns)) ORDER BY (trace_id, span_id)
SETTINGS index_granularity = 1024
EMPTY AS __span_select__;
CREATE TABLE IF NOT EXISTS __db__.__requests__ __on_cluster__
ENGINE = __replicated__ReplacingMergeTree(version)
PARTITION BY toDate(fromUnixTimestamp64Nano(call_start_ns))
ORDER BY (deployment, toStartOfHour(fromUnixTimestamp64Nano(call_start_ns)), trace_id, span_id)
SETTINGS allow_nullable_key = 1
EMPTY AS __requests_select__;
CREATE TABLE IF NOT EXISTS __db__.__early__ __on_cluster__
ENGINE = __replicated__ReplacingMergeTree(version)
PARTITION BY toDate(fromUnixTimestamp64Nano(gateway_start)) ORDER BY (trace_id, parent_span_id)
SETTINGS allow_nullable_key = 1
EMPTY AS __early_select__;
CREATE TABLE IF NOT EXISTS __db__.__admission__ __on_cluster__
ENGINE = __replicated__ReplacingMergeTree
PARTITION BY tuple() ORDER BY (deployment, day)
SETTINGS allow_nullable_key = 1
EMPTY AS __admission_select__;
CREATE TABLE IF NOT EXISTS __db__.__touched__ __on_cluster__
ENGINE = __replicated__MergeTree
PARTITION BY toDate(at) ORDER BY at
EMPTY AS __touched_select__
