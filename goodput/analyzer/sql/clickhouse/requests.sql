-- The spans of a window of the Collector's otel_traces table, as spans.sql projects them (its select list goes where
-- the placeholder below is): what the request model (model.sql) reads at read time, when the database is not
-- prepared (`goodput analyze prepare`). goodput/analyzer/backend.py derives each model CTE a statement reads once per
-- command and window into a temporary table, which the statements of this directory read (`__requests__` at their
-- head becomes `requests AS (SELECT * FROM <table>)` and the like).
-- {database}, {table}: where the spans are; {span_from}, {span_to} (NULL: open): the span start times read, the
-- window widened by the longest request the model follows (goodput/analyzer/backend.py), pruned by the table's partitions;
-- {passes}, {pass}: the traces of this pass (goodput/analyzer/backend.py derives a large window in several).
__span_columns__
FROM {database:Identifier}.{table:Identifier}
WHERE ({span_from:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp >= {span_from:Nullable(DateTime64(9, 'UTC'))})
  AND ({span_to:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp < {span_to:Nullable(DateTime64(9, 'UTC'))})
  AND ({passes:UInt64} = 1 OR cityHash64(TraceId) % {passes:UInt64} = {pass:UInt64})
