-- The traces an insert block touched (the view on the Collector's table: __table__ is the block), with the first and
-- last start of its spans of each and the time of the insert: what the sync reads to know which traces to recompute.
SELECT TraceId AS trace_id, toUnixTimestamp64Nano(min(Timestamp)) AS first_ns,
    toUnixTimestamp64Nano(max(Timestamp)) AS last_ns, toUInt64(count()) AS spans, now64(6, 'UTC') AS at
FROM __db__.__table__
GROUP BY TraceId
