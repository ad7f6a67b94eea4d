-- The spans a view's model reads: the stored spans of the traces in the insert block (within the span margin of the
-- block's times) and the block's own, each span once.
SELECT * FROM (
    SELECT * FROM __db__.__spans__
    WHERE trace_id IN (SELECT TraceId FROM __db__.__table__)
      AND start_ns >= (SELECT toUnixTimestamp64Nano(min(Timestamp)) FROM __db__.__table__) - __margin_ns__
      AND start_ns < (SELECT toUnixTimestamp64Nano(max(Timestamp)) FROM __db__.__table__) + __margin_ns__
    UNION ALL
    __span_select__
) LIMIT 1 BY trace_id, span_id
