-- The first and last arrival of one deployment in the window: triage narrows its window to the data it has.
SELECT min(ts), max(ts)
FROM requests
WHERE deployment = $deployment AND ($since IS NULL OR ts >= $since) AND ($until IS NULL OR ts < $until);
