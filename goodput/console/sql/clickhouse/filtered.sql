-- The requests the sidebar's filters select (goodput/console/sql/filtered.sql); NULL means "any". The other files include
-- it as a subquery, below the request model their head derives (goodput/analyzer/sql/clickhouse/requests.sql).
SELECT * FROM requests
WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))}) AND ts < {until:DateTime64(6, 'UTC')}
  AND ({deployment:Nullable(String)} IS NULL OR deployment = {deployment:Nullable(String)})
  AND ({tier:Nullable(String)} IS NULL OR tier = {tier:Nullable(String)})
  AND ({tenant:Nullable(String)} IS NULL OR tenant = {tenant:Nullable(String)})
