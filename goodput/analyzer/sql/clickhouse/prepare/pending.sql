-- What a sync has to do: the inserts (goodput_touched) after {synced_from} (µs: the last sync's mark less an overlap
-- for inserts that committed late), if any is after {synced} (the mark itself); the newest insert's time (the next
-- mark), their spans' first and last start, and how many spans they wrote (the sync's passes). No row: nothing to do.
SELECT toUnixTimestamp64Micro(max(at)) AS synced_to, min(first_ns) AS first_ns, max(last_ns) AS last_ns,
    sum(spans) AS spans
FROM __db__.__touched__
WHERE at > fromUnixTimestamp64Micro({synced_from:Int64}, 'UTC')
HAVING max(at) > fromUnixTimestamp64Micro({synced:Int64}, 'UTC')
