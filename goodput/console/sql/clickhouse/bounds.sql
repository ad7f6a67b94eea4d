-- How much the store holds (goodput/console/sql/bounds.sql): the time range is anchored at the newest arrival, a
-- request in flight's included.
WITH __requests__
SELECT count() AS requests, minOrNull(ts) AS first,
    greatest(coalesce(maxOrNull(ts), toDateTime64(0, 6, 'UTC')),
             coalesce((SELECT maxOrNull(fromUnixTimestamp64Micro(intDiv(gateway_start, 1000), 'UTC')) FROM early_only),
                      toDateTime64(0, 6, 'UTC'))) AS last
FROM requests
