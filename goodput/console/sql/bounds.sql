-- How much the store holds: the time range is anchored at the newest arrival, a request in flight's included (its
-- early spans came), so a range's figures cover what is still queued too and say it is in flight (a compressed demo
-- runs ahead of the wall clock).
SELECT count(*) AS requests, min(ts) AS first,
    greatest(max(ts), (SELECT max(make_timestamptz(gateway_start // 1000)) FROM in_flight)) AS last
FROM requests;
