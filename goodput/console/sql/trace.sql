-- One trace's requests and their segments, in time order (a trace with retries holds several requests).
SELECT s.request_id, s.segment, s.start_ns, s.duration_s, r.replica, r.outcome
FROM segments s LEFT JOIN requests r ON r.trace_id = s.trace_id AND r.request_id IS NOT DISTINCT FROM s.request_id
WHERE s.trace_id = $trace_id
ORDER BY s.start_ns NULLS LAST, s.segment;
