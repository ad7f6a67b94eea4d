-- How much the store holds (goodput/console/sql/bounds.sql): the time range is anchored at the newest request.
WITH __requests__
SELECT count() AS requests, minOrNull(ts) AS first, maxOrNull(ts) AS last FROM requests
