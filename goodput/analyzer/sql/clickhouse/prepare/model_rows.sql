-- What the model tables are filled with, over model.sql's CTEs (its `spans` the caller's): each request, each
-- request's early spans and each admitting deployment, with the version a ReplacingMergeTree keeps the newest of (the
-- number of the trace's spans seen: a trace only gains spans). prepare.py names one of requests / early / admission.
__model__,
seen AS (SELECT trace_id AS seen_trace_id, toUInt64(count()) AS version FROM spans GROUP BY trace_id)
SELECT * EXCEPT seen_trace_id FROM __rows__ JOIN seen ON seen.seen_trace_id = __rows__.trace_id
