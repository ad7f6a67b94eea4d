-- The spans a backfill chunk's model reads: the stored spans from a span margin before the chunk to one after it, the
-- traces of this pass ({passes}, {pass}: a chunk over goodput.analyzer.backend.SPANS_PER_PASS spans is done in several).
-- prepare.py keeps the rows of the chunk's own hours ({chunk_from}, {chunk_to} in ns).
SELECT * FROM __db__.__spans__
WHERE start_ns >= {chunk_from:Int64} - __margin_ns__ AND start_ns < {chunk_to:Int64} + __margin_ns__
  AND ({passes:UInt64} = 1 OR cityHash64(trace_id) % {passes:UInt64} = {pass:UInt64})
LIMIT 1 BY trace_id, span_id
