-- One trace's requests and their segments in time order (goodput/console/sql/trace.sql). The request model carries each
-- segment's duration, not its span's start: the segments are laid end to end from the request's start, in their
-- order (gateway, queue, prefill, kv_transfer, decode, send); `other` has no start, as in the DuckDB store.
WITH __requests__
SELECT request_id, seg.1 AS segment,
    if(seg.1 = 'other', NULL,
       toInt64(start_ns + arraySum(arraySlice([coalesce(gateway_s, 0), coalesce(queue_s, 0), coalesce(prefill_s, 0),
                                                coalesce(kv_transfer_s, 0), coalesce(decode_s, 0), coalesce(send_s, 0)],
                                               1, seg.3 - 1)) * 1e9))
        AS start_ns,
    seg.2 AS duration_s, replica, outcome
FROM requests
ARRAY JOIN arrayZip(['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other'],
                    [gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s, other_s], [1, 2, 3, 4, 5, 6, 7]) AS seg
WHERE trace_id = {trace_id:String} AND seg.2 IS NOT NULL
ORDER BY start_ns ASC NULLS LAST, segment
