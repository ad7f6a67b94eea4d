-- The span row the request model reads (model.sql), projected from the Collector's otel_traces columns: one place for
-- every attribute the model uses, so the model reads the same columns from otel_traces (read time: requests.sql), from
-- an insert block and from the narrow goodput_spans table that `goodput analyze prepare` keeps (prepare/*.sql).
-- A map lookup of a missing key is '' in ClickHouse: an empty attribute counts as absent. The caller appends FROM and WHERE.
SELECT TraceId AS trace_id, SpanId AS span_id, ParentSpanId AS parent_span_id, SpanName AS name,
    CAST(SpanKind IN ('Server', 'SPAN_KIND_SERVER') AS UInt8) AS server,   -- not LowCardinality: a table's column
    toUnixTimestamp64Nano(Timestamp) AS start_ns, toInt64(start_ns + Duration) AS end_ns,
    CAST(StatusCode IN ('Error', 'STATUS_CODE_ERROR') AS UInt8) AS error, ServiceName AS service,
    coalesce(nullIf(SpanAttributes['llm.deployment'], ''), nullIf(ResourceAttributes['llm.deployment'], ''))
        AS deployment_attr,
    coalesce(nullIf(SpanAttributes['llm.tenant'], ''), nullIf(SpanAttributes['goodput.tenant'], ''),
             nullIf(SpanAttributes['tenant.id'], ''), nullIf(SpanAttributes['enduser.id'], '')) AS tenant,
    coalesce(nullIf(SpanAttributes['llm.tier'], ''), nullIf(SpanAttributes['goodput.tier'], '')) AS tier,
    coalesce(nullIf(SpanAttributes['llm.route'], ''), nullIf(SpanAttributes['goodput.route'], ''),
             nullIf(SpanAttributes['http.route'], '')) AS route,
    coalesce(nullIf(SpanAttributes['llm.scene'], ''), nullIf(SpanAttributes['goodput.scene'], '')) AS scene,
    coalesce(nullIf(SpanAttributes['gen_ai.request.model'], ''), nullIf(SpanAttributes['gen_ai.response.model'], ''))
        AS model,
    coalesce(nullIf(SpanAttributes['gen_ai.usage.input_tokens'], ''),
             nullIf(SpanAttributes['gen_ai.usage.prompt_tokens'], '')) AS a_input,
    coalesce(nullIf(SpanAttributes['gen_ai.usage.output_tokens'], ''),
             nullIf(SpanAttributes['gen_ai.usage.completion_tokens'], '')) AS a_output,
    coalesce(nullIf(SpanAttributes['llm.request_id'], ''), nullIf(SpanAttributes['gen_ai.request.id'], '')) AS a_request_id,
    coalesce(nullIf(SpanAttributes['llm.replica'], ''), nullIf(ResourceAttributes['service.instance.id'], '')) AS replica,
    nullIf(SpanAttributes['llm.cached_tokens'], '') AS a_cached, nullIf(SpanAttributes['llm.preemptions'], '') AS a_preemptions,
    nullIf(SpanAttributes['llm.outcome'], '') AS a_outcome,
    -- vLLM writes its finish reasons as a JSON list in one string: the first one
    coalesce(nullIf(SpanAttributes['llm.finish_reason'], ''),
             nullIf(regexpExtract(SpanAttributes['gen_ai.response.finish_reasons'], '[A-Za-z_]+'), '')) AS finish_reason,
    nullIf(SpanAttributes['llm.reject_reason'], '') AS reject_reason,
    nullIf(SpanAttributes['llm.degraded'], '') AS degraded, nullIf(SpanAttributes['llm.fallback_from'], '') AS fallback_from,
    nullIf(SpanAttributes['llm.fallback_reason'], '') AS fallback_reason,
    nullIf(SpanAttributes['llm.prefill_replica'], '') AS prefill_replica,
    nullIf(SpanAttributes['gen_ai.latency.time_in_queue'], '') AS l_queue,
    nullIf(SpanAttributes['gen_ai.latency.time_in_model_prefill'], '') AS l_prefill,
    nullIf(SpanAttributes['gen_ai.latency.time_in_model_decode'], '') AS l_decode,
    nullIf(SpanAttributes['gen_ai.latency.e2e'], '') AS l_e2e,
    nullIf(SpanAttributes['gen_ai.latency.time_to_first_token'], '') AS l_ttft
