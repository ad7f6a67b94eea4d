-- The spans a view's model reads: the insert block's own and the stored spans of the traces it touched (within the
-- span margin of the block's times), each span once. The block comes first: a materialized view is triggered by the
-- first table its query reads (here the Collector's table, __table__), and inside the view every reference to that
-- table reads the insert block; goodput_spans is read as stored (the view copying the block there may not have run).
SELECT * FROM (
    __span_select__
    UNION ALL
    SELECT * FROM __db__.__spans__
    WHERE trace_id IN (SELECT TraceId FROM __db__.__table__)
      AND start_ns >= (SELECT toUnixTimestamp64Nano(min(Timestamp)) FROM __db__.__table__) - __margin_ns__
      AND start_ns < (SELECT toUnixTimestamp64Nano(max(Timestamp)) FROM __db__.__table__) + __margin_ns__
) LIMIT 1 BY trace_id, span_id
