-- Split the spans of the relation `src` (a Parquet scan or a decoded batch, in the trace store's schema)
-- into the staging tables. $source labels where they came from.
INSERT INTO staged_roots
SELECT trace_id, span_id, name, start_time_unix_nano, end_time_unix_nano, status_code, $source,
    coalesce(attributes['llm.deployment'], resource['llm.deployment'], nullif(service_name, '')),
    attributes['llm.request_id'], attributes['gen_ai.request.id'],
    coalesce(attributes['gen_ai.request.model'], attributes['gen_ai.response.model']),
    attributes['llm.replica'], attributes['llm.tenant'], attributes['llm.tier'],
    coalesce(attributes['llm.route'], attributes['llm.scene']), attributes['llm.scene'],
    coalesce(attributes['gen_ai.usage.input_tokens'], attributes['gen_ai.usage.prompt_tokens']),
    coalesce(attributes['gen_ai.usage.output_tokens'], attributes['gen_ai.usage.completion_tokens']),
    attributes['llm.cached_tokens'], attributes['llm.preemptions'], attributes['llm.outcome'],
    attributes['llm.finish_reason'], attributes['llm.reject_reason'],
    attributes['gen_ai.latency.time_in_queue'], attributes['gen_ai.latency.time_in_model_prefill'],
    attributes['gen_ai.latency.time_in_model_decode'], attributes['gen_ai.latency.e2e'],
    attributes['gen_ai.latency.time_to_first_token']
FROM src
WHERE coalesce(parent_span_id, '') = '' AND name IN ('llm.request', 'llm_request');

INSERT INTO staged_kids
SELECT trace_id, $source, count(DISTINCT span_id),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.gateway'), max(end_time_unix_nano) FILTER (WHERE name = 'llm.gateway'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.queue'),   max(end_time_unix_nano) FILTER (WHERE name = 'llm.queue'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.prefill'), max(end_time_unix_nano) FILTER (WHERE name = 'llm.prefill'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.decode'),  max(end_time_unix_nano) FILTER (WHERE name = 'llm.decode'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.send'),    max(end_time_unix_nano) FILTER (WHERE name = 'llm.send')
FROM src
WHERE coalesce(parent_span_id, '') <> '' AND name IN ('llm.gateway', 'llm.queue', 'llm.prefill', 'llm.decode', 'llm.send')
GROUP BY trace_id;

INSERT INTO staged_other
SELECT trace_id, span_id, name, $source
FROM src
WHERE name NOT IN ('llm.request', 'llm_request', 'llm.gateway', 'llm.queue', 'llm.prefill', 'llm.decode', 'llm.send')
   OR (coalesce(parent_span_id, '') <> '' AND name IN ('llm.request', 'llm_request'))
   OR (coalesce(parent_span_id, '') = '' AND name IN ('llm.gateway', 'llm.queue', 'llm.prefill', 'llm.decode', 'llm.send'));
