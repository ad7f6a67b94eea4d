-- The spans a sync's model reads: the stored spans of the traces inserted after {synced_from} up to {synced_to} (µs)
-- (goodput_touched, by insert time), within the span margin of those inserts' spans (the longest request the model
-- follows: goodput.analyzer.backend.SPAN_MARGIN), each span once; {passes}, {pass}: the traces of this pass.
SELECT * FROM __db__.__spans__
WHERE trace_id IN (SELECT trace_id FROM __db__.__touched__
                   WHERE at > fromUnixTimestamp64Micro({synced_from:Int64}, 'UTC')
                     AND at <= fromUnixTimestamp64Micro({synced_to:Int64}, 'UTC')
                     AND ({passes:UInt64} = 1 OR cityHash64(trace_id) % {passes:UInt64} = {pass:UInt64}))
  AND start_ns >= {first_ns:Int64} - __margin_ns__ AND start_ns < {last_ns:Int64} + __margin_ns__
LIMIT 1 BY trace_id, span_id
