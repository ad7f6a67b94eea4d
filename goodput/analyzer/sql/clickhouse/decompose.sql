-- Latency decomposition per group (and time bucket): goodput/analyzer/sql/decompose.sql in ClickHouse's dialect.
-- {since}, {until} (NULL = open), {percentiles} (fractions); {dims...} are allow-listed column names.
WITH __requests__,
r AS (
    SELECT {dims_select}, e2e_s, ttft_s, gateway_s, queue_s, prefill_s, kv_transfer_s, decode_s, send_s, other_s,
        ttft_other_s, outcome
    FROM requests
    WHERE ({since:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts >= {since:Nullable(DateTime64(6, 'UTC'))})
      AND ({until:Nullable(DateTime64(6, 'UTC'))} IS NULL OR ts < {until:Nullable(DateTime64(6, 'UTC'))}) {where_extra}
), ok AS (
    SELECT * FROM r WHERE outcome = 'ok'
), stats AS (
    SELECT {dims},
        count() AS requests,
        arraySort(groupArray(e2e_s)) AS e2e_v, arraySort(groupArray(ttft_s)) AS ttft_v,   -- for quantile_cont's list
        quantileExactInclusive(0.95)(e2e_s) AS e2e_p95, quantileExactInclusive(0.99)(e2e_s) AS e2e_p99,
        quantileExactInclusive(0.95)(ttft_s) AS ttft_p95, quantileExactInclusive(0.99)(ttft_s) AS ttft_p99,
        avg(coalesce(gateway_s, 0)) AS gateway_s, avg(coalesce(queue_s, 0)) AS queue_s,
        avg(coalesce(prefill_s, 0)) AS prefill_s, avg(coalesce(kv_transfer_s, 0)) AS kv_transfer_s,
        avg(coalesce(decode_s, 0)) AS decode_s,
        avg(coalesce(send_s, 0)) AS send_s, avg(other_s) AS other_s,
        countIf(other_s > 0.001) AS gaps, countIf(other_s < -0.001) AS overlaps
    FROM ok GROUP BY ALL
), totals AS (
    SELECT {dims}, count() AS all_requests FROM r GROUP BY ALL
), tail AS (
    SELECT {dims_o},
        avgIfOrNull(coalesce(o.gateway_s, 0), o.e2e_s >= s.e2e_p95) AS g95, avgIfOrNull(coalesce(o.queue_s, 0), o.e2e_s >= s.e2e_p95) AS q95,
        avgIfOrNull(coalesce(o.prefill_s, 0), o.e2e_s >= s.e2e_p95) AS p95, avgIfOrNull(coalesce(o.kv_transfer_s, 0), o.e2e_s >= s.e2e_p95) AS k95, avgIfOrNull(coalesce(o.decode_s, 0), o.e2e_s >= s.e2e_p95) AS d95,
        avgIfOrNull(coalesce(o.send_s, 0), o.e2e_s >= s.e2e_p95) AS s95, avgIfOrNull(o.other_s, o.e2e_s >= s.e2e_p95) AS o95,
        avgIfOrNull(coalesce(o.gateway_s, 0), o.e2e_s >= s.e2e_p99) AS g99, avgIfOrNull(coalesce(o.queue_s, 0), o.e2e_s >= s.e2e_p99) AS q99,
        avgIfOrNull(coalesce(o.prefill_s, 0), o.e2e_s >= s.e2e_p99) AS p99, avgIfOrNull(coalesce(o.kv_transfer_s, 0), o.e2e_s >= s.e2e_p99) AS k99, avgIfOrNull(coalesce(o.decode_s, 0), o.e2e_s >= s.e2e_p99) AS d99,
        avgIfOrNull(coalesce(o.send_s, 0), o.e2e_s >= s.e2e_p99) AS s99, avgIfOrNull(o.other_s, o.e2e_s >= s.e2e_p99) AS o99,
        avgIfOrNull(coalesce(o.gateway_s, 0), o.ttft_s >= s.ttft_p95) AS tg95, avgIfOrNull(coalesce(o.queue_s, 0), o.ttft_s >= s.ttft_p95) AS tq95,
        avgIfOrNull(coalesce(o.prefill_s, 0), o.ttft_s >= s.ttft_p95) AS tp95, avgIfOrNull(coalesce(o.kv_transfer_s, 0), o.ttft_s >= s.ttft_p95) AS tk95, avgIfOrNull(o.ttft_other_s, o.ttft_s >= s.ttft_p95) AS to95,
        avgIfOrNull(coalesce(o.gateway_s, 0), o.ttft_s >= s.ttft_p99) AS tg99, avgIfOrNull(coalesce(o.queue_s, 0), o.ttft_s >= s.ttft_p99) AS tq99,
        avgIfOrNull(coalesce(o.prefill_s, 0), o.ttft_s >= s.ttft_p99) AS tp99, avgIfOrNull(coalesce(o.kv_transfer_s, 0), o.ttft_s >= s.ttft_p99) AS tk99, avgIfOrNull(o.ttft_other_s, o.ttft_s >= s.ttft_p99) AS to99
    FROM ok o JOIN stats s USING ({dims_using})
    GROUP BY ALL
)
SELECT {dims}, s.* EXCEPT ({dims}, e2e_v, ttft_v),
    -- DuckDB's quantile_cont: linear between the two nearest of the sorted values
    arrayMap(p -> s.e2e_v[toUInt64(floor((length(s.e2e_v) - 1) * p)) + 1] + ((length(s.e2e_v) - 1) * p - floor((length(s.e2e_v) - 1) * p))
        * (s.e2e_v[least(toUInt64(floor((length(s.e2e_v) - 1) * p)) + 2, length(s.e2e_v))] - s.e2e_v[toUInt64(floor((length(s.e2e_v) - 1) * p)) + 1]),
        if(empty(s.e2e_v), [], {percentiles:Array(Float64)})) AS e2e_q,
    arrayMap(p -> s.ttft_v[toUInt64(floor((length(s.ttft_v) - 1) * p)) + 1] + ((length(s.ttft_v) - 1) * p - floor((length(s.ttft_v) - 1) * p))
        * (s.ttft_v[least(toUInt64(floor((length(s.ttft_v) - 1) * p)) + 2, length(s.ttft_v))] - s.ttft_v[toUInt64(floor((length(s.ttft_v) - 1) * p)) + 1]),
        if(empty(s.ttft_v), [], {percentiles:Array(Float64)})) AS ttft_q,
    t.all_requests,
    if(tail.g95 IS NULL, NULL, ['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other'][
        indexOf([tail.g95, tail.q95, tail.p95, tail.k95, tail.d95, tail.s95, tail.o95],
                greatest(tail.g95, tail.q95, tail.p95, tail.k95, tail.d95, tail.s95, tail.o95))]) AS e2e_p95_top_segment,
    if(tail.g99 IS NULL, NULL, ['gateway', 'queue', 'prefill', 'kv_transfer', 'decode', 'send', 'other'][
        indexOf([tail.g99, tail.q99, tail.p99, tail.k99, tail.d99, tail.s99, tail.o99],
                greatest(tail.g99, tail.q99, tail.p99, tail.k99, tail.d99, tail.s99, tail.o99))]) AS e2e_p99_top_segment,
    if(tail.tg95 IS NULL, NULL, ['gateway', 'queue', 'prefill', 'kv_transfer', 'other'][
        indexOf([tail.tg95, tail.tq95, tail.tp95, tail.tk95, tail.to95],
                greatest(tail.tg95, tail.tq95, tail.tp95, tail.tk95, tail.to95))])
        AS ttft_p95_top_segment,
    if(tail.tg99 IS NULL, NULL, ['gateway', 'queue', 'prefill', 'kv_transfer', 'other'][
        indexOf([tail.tg99, tail.tq99, tail.tp99, tail.tk99, tail.to99],
                greatest(tail.tg99, tail.tq99, tail.tp99, tail.tk99, tail.to99))])
        AS ttft_p99_top_segment
FROM stats s JOIN totals t USING ({dims_using}) JOIN tail USING ({dims_using})
ORDER BY {order}
