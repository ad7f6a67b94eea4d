-- Latency decomposition per group (and time bucket): counts, percentiles of E2E and TTFT, mean seconds per
-- segment, clock-skew gaps and overlaps, and for the slow tail (at or above p95 / p99) the segment that
-- contributes most. {dims} are allow-listed column names; filters and percentiles are parameters:
-- $since, $until (timestamps or NULL), $percentiles (list of fractions).
WITH r AS (
    SELECT {dims_select}, e2e_s, ttft_s, gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s, other_s,
        ttft_other_s, outcome
    FROM requests
    WHERE ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until) {where_extra}
), ok AS (
    SELECT * FROM r WHERE outcome = 'ok'
), stats AS (
    SELECT {dims},
        count(*) AS requests,
        quantile_cont(e2e_s, $percentiles) AS e2e_q,
        quantile_cont(ttft_s, $percentiles) AS ttft_q,
        quantile_cont(e2e_s, 0.95) AS e2e_p95, quantile_cont(e2e_s, 0.99) AS e2e_p99,
        quantile_cont(ttft_s, 0.95) AS ttft_p95, quantile_cont(ttft_s, 0.99) AS ttft_p99,
        avg(coalesce(gateway_s, 0)) AS gateway_s, avg(coalesce(queue_s, 0)) AS queue_s,
        avg(coalesce(prefill_s, 0)) AS prefill_s, avg(coalesce(kv_transfer_s, 0)) AS kv_transfer_s,
        avg(coalesce(decode_s, 0)) AS decode_s,
        avg(coalesce(send_s, 0)) AS send_s, avg(other_s) AS other_s,
        count(*) FILTER (WHERE other_s > 0.001) AS gaps, count(*) FILTER (WHERE other_s < -0.001) AS overlaps
    FROM ok GROUP BY ALL
), totals AS (
    SELECT {dims}, count(*) AS all_requests FROM r GROUP BY ALL
), tail AS (
    SELECT {dims_o},
        avg(coalesce(o.gateway_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS g95, avg(coalesce(o.queue_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS q95,
        avg(coalesce(o.prefill_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS p95, avg(coalesce(o.kv_transfer_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS k95, avg(coalesce(o.decode_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS d95,
        avg(coalesce(o.send_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS s95, avg(o.other_s) FILTER (WHERE o.e2e_s >= s.e2e_p95) AS o95,
        avg(coalesce(o.gateway_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS g99, avg(coalesce(o.queue_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS q99,
        avg(coalesce(o.prefill_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS p99, avg(coalesce(o.kv_transfer_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS k99, avg(coalesce(o.decode_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS d99,
        avg(coalesce(o.send_s, 0)) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS s99, avg(o.other_s) FILTER (WHERE o.e2e_s >= s.e2e_p99) AS o99,
        avg(coalesce(o.gateway_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p95) AS tg95, avg(coalesce(o.queue_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p95) AS tq95,
        avg(coalesce(o.prefill_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p95) AS tp95, avg(coalesce(o.kv_transfer_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p95) AS tk95, avg(o.ttft_other_s) FILTER (WHERE o.ttft_s >= s.ttft_p95) AS to95,
        avg(coalesce(o.gateway_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p99) AS tg99, avg(coalesce(o.queue_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p99) AS tq99,
        avg(coalesce(o.prefill_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p99) AS tp99, avg(coalesce(o.kv_transfer_s, 0)) FILTER (WHERE o.ttft_s >= s.ttft_p99) AS tk99, avg(o.ttft_other_s) FILTER (WHERE o.ttft_s >= s.ttft_p99) AS to99
    FROM ok o JOIN stats s USING ({dims_using})
    GROUP BY ALL
)
SELECT s.*, t.all_requests,
    CASE WHEN tail.g95 IS NULL THEN NULL ELSE ['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other'][
        list_position([tail.g95, tail.q95, tail.p95, tail.k95, tail.d95, tail.s95, tail.o95],
                      greatest(tail.g95, tail.q95, tail.p95, tail.k95, tail.d95, tail.s95, tail.o95))] END AS e2e_p95_top_segment,
    CASE WHEN tail.g99 IS NULL THEN NULL ELSE ['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other'][
        list_position([tail.g99, tail.q99, tail.p99, tail.k99, tail.d99, tail.s99, tail.o99],
                      greatest(tail.g99, tail.q99, tail.p99, tail.k99, tail.d99, tail.s99, tail.o99))] END AS e2e_p99_top_segment,
    CASE WHEN tail.tg95 IS NULL THEN NULL ELSE ['gateway', 'queue', 'prefill', 'kv_transfer', 'other'][
        list_position([tail.tg95, tail.tq95, tail.tp95, tail.tk95, tail.to95],
                      greatest(tail.tg95, tail.tq95, tail.tp95, tail.tk95, tail.to95))] END
        AS ttft_p95_top_segment,
    CASE WHEN tail.tg99 IS NULL THEN NULL ELSE ['gateway', 'queue', 'prefill', 'kv_transfer', 'other'][
        list_position([tail.tg99, tail.tq99, tail.tp99, tail.tk99, tail.to99],
                      greatest(tail.tg99, tail.tq99, tail.tp99, tail.tk99, tail.to99))] END
        AS ttft_p99_top_segment
FROM stats s JOIN totals t USING ({dims_using}) JOIN tail USING ({dims_using})
ORDER BY {order};
