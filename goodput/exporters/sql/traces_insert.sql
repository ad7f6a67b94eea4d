-- Rows for the Collector's otel_traces table (traces_table.sql), one JSON object a line in {rows:String}, bound as a
-- parameter: the columns of the Collector's own traces_insert.sql, times as Unix nanoseconds made DateTime64(9) here.
INSERT INTO {database:Identifier}.{table:Identifier} (
    Timestamp, TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName, ResourceAttributes,
    ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
    `Events.Timestamp`, `Events.Name`, `Events.Attributes`,
    `Links.TraceId`, `Links.SpanId`, `Links.TraceState`, `Links.Attributes`
)
SELECT fromUnixTimestamp64Nano(Timestamp), TraceId, SpanId, ParentSpanId, TraceState, SpanName, SpanKind, ServiceName,
    ResourceAttributes, ScopeName, ScopeVersion, SpanAttributes, Duration, StatusCode, StatusMessage,
    arrayMap(t -> fromUnixTimestamp64Nano(t), EventsTimestamp), EventsName, EventsAttributes,
    LinksTraceId, LinksSpanId, LinksTraceState, LinksAttributes
FROM format(JSONEachRow,
    'Timestamp Int64, TraceId String, SpanId String, ParentSpanId String, TraceState String, SpanName String,
     SpanKind String, ServiceName String, ResourceAttributes Map(String, String), ScopeName String,
     ScopeVersion String, SpanAttributes Map(String, String), Duration UInt64, StatusCode String,
     StatusMessage String, EventsTimestamp Array(Int64), EventsName Array(String),
     EventsAttributes Array(Map(String, String)), LinksTraceId Array(String), LinksSpanId Array(String),
     LinksTraceState Array(String), LinksAttributes Array(Map(String, String))',
    {rows:String})
