-- The spans a window's request model reads (goodput/analyzer/sql/clickhouse/requests.sql's window), to size its passes.
SELECT count() AS spans
FROM {database:Identifier}.{table:Identifier}
WHERE ({span_from:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp >= {span_from:Nullable(DateTime64(9, 'UTC'))})
  AND ({span_to:Nullable(DateTime64(9, 'UTC'))} IS NULL OR Timestamp < {span_to:Nullable(DateTime64(9, 'UTC'))})
