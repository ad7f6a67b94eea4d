-- Split the spans of the relation `src` (a Parquet scan or a decoded batch, in the trace store's schema)
-- into the staging tables. $source labels where they came from.
INSERT INTO staged_engine
SELECT trace_id, span_id, coalesce(parent_span_id, ''), name, kind, start_time_unix_nano, end_time_unix_nano,
    status_code, $source,
    coalesce(attributes['llm.deployment'], resource['llm.deployment'], nullif(service_name, '')),
    coalesce(attributes['llm.request_id'], attributes['gen_ai.request.id'], span_id),
    model_attr(attributes), coalesce(attributes['llm.replica'], resource['service.instance.id']), tenant_attr(attributes), tier_attr(attributes),
    route_attr(attributes), scene_attr(attributes), input_attr(attributes), output_attr(attributes),
    attributes['llm.cached_tokens'], attributes['llm.preemptions'], attributes['llm.outcome'],
    -- vLLM writes its finish reasons as a JSON list in one string: the first one
    coalesce(attributes['llm.finish_reason'], regexp_extract(attributes['gen_ai.response.finish_reasons'], '[A-Za-z_]+')),
    attributes['llm.reject_reason'], nullif(attributes['llm.degraded'], ''), nullif(attributes['llm.fallback_from'], ''),
    nullif(attributes['llm.fallback_reason'], ''),
    attributes['gen_ai.latency.time_in_queue'], attributes['gen_ai.latency.time_in_model_prefill'],
    attributes['gen_ai.latency.time_in_model_decode'], attributes['gen_ai.latency.e2e'],
    attributes['gen_ai.latency.time_to_first_token']
FROM src
WHERE name IN ('llm.request', 'llm_request');

INSERT INTO staged_kids
SELECT trace_id, coalesce(parent_span_id, ''), $source, count(DISTINCT span_id),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.gateway'), max(end_time_unix_nano) FILTER (WHERE name = 'llm.gateway'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.queue'),   max(end_time_unix_nano) FILTER (WHERE name = 'llm.queue'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.prefill'), max(end_time_unix_nano) FILTER (WHERE name = 'llm.prefill'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.decode'),  max(end_time_unix_nano) FILTER (WHERE name = 'llm.decode'),
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.send'),    max(end_time_unix_nano) FILTER (WHERE name = 'llm.send'),
    -- what the gateway span knows at admission (goodput's live fleet), to place a request in flight
    any_value(coalesce(attributes['llm.deployment'], resource['llm.deployment'])) FILTER (WHERE name = 'llm.gateway'),
    any_value(model_attr(attributes)) FILTER (WHERE name = 'llm.gateway'),
    any_value(tenant_attr(attributes)) FILTER (WHERE name = 'llm.gateway'),
    any_value(tier_attr(attributes)) FILTER (WHERE name = 'llm.gateway'),
    any_value(route_attr(attributes)) FILTER (WHERE name = 'llm.gateway'),
    any_value(attributes['llm.request_id']) FILTER (WHERE name = 'llm.gateway'),
    -- P/D disaggregation: the KV cache's move from the prefill replica to the decode replica
    min(start_time_unix_nano) FILTER (WHERE name = 'llm.kv_transfer'), max(end_time_unix_nano) FILTER (WHERE name = 'llm.kv_transfer'),
    any_value(attributes['llm.prefill_replica']) FILTER (WHERE name = 'llm.kv_transfer')
FROM src
WHERE name IN ('llm.gateway', 'llm.queue', 'llm.prefill', 'llm.kv_transfer', 'llm.decode', 'llm.send')
GROUP BY trace_id, coalesce(parent_span_id, '');

INSERT INTO staged_context
SELECT trace_id, span_id, coalesce(parent_span_id, ''), kind, start_time_unix_nano, end_time_unix_nano, $source,
    tenant_attr(attributes), tier_attr(attributes), route_attr(attributes), scene_attr(attributes),
    model_attr(attributes), input_attr(attributes), output_attr(attributes)
FROM src
WHERE name NOT IN ('llm.request', 'llm_request', 'llm.gateway', 'llm.queue', 'llm.prefill', 'llm.kv_transfer', 'llm.decode',
                   'llm.send');
