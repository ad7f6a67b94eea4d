-- The request model of a prepared database (`goodput analyze prepare`, goodput/analyzer/prepare.py): the tables its
-- materialized views keep, read with FINAL (the newest version of each row) and the window's time filter, on the
-- columns the tables are partitioned by, so a window reads its days only. The same window as read time (requests.sql):
-- the engine spans, early spans and admissions that start from {span_from} to {span_to} (NULL: open).
requests AS (
    SELECT * EXCEPT version FROM {database:Identifier}.goodput_requests FINAL
    WHERE ({span_from:Nullable(DateTime64(9, 'UTC'))} IS NULL
           OR call_start_ns >= toUnixTimestamp64Nano({span_from:Nullable(DateTime64(9, 'UTC'))}))
      AND ({span_to:Nullable(DateTime64(9, 'UTC'))} IS NULL
           OR call_start_ns < toUnixTimestamp64Nano({span_to:Nullable(DateTime64(9, 'UTC'))}))
), early_only AS (
    SELECT * EXCEPT (open, version) FROM {database:Identifier}.goodput_early FINAL
    WHERE open
      AND ({span_from:Nullable(DateTime64(9, 'UTC'))} IS NULL
           OR gateway_start >= toUnixTimestamp64Nano({span_from:Nullable(DateTime64(9, 'UTC'))}))
      AND ({span_to:Nullable(DateTime64(9, 'UTC'))} IS NULL
           OR gateway_start < toUnixTimestamp64Nano({span_to:Nullable(DateTime64(9, 'UTC'))}))
), admission_spans AS (
    SELECT DISTINCT deployment FROM {database:Identifier}.goodput_admission
    WHERE ({span_from:Nullable(DateTime64(9, 'UTC'))} IS NULL OR day >= toDate({span_from:Nullable(DateTime64(9, 'UTC'))}))
      AND ({span_to:Nullable(DateTime64(9, 'UTC'))} IS NULL OR day <= toDate({span_to:Nullable(DateTime64(9, 'UTC'))}))
)
