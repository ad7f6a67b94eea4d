-- How much the store holds: the time range is anchored at the newest request (a compressed demo runs ahead of
-- the wall clock).
SELECT count(*) AS requests, min(ts) AS first, max(ts) AS last FROM requests;
