-- goodput_meta: which preparation a database holds (goodput/analyzer/backend.py reads the tables only when its
-- schema_version is SCHEMA_VERSION and its source the table it was asked for).
CREATE TABLE IF NOT EXISTS __db__.__meta__ __on_cluster__
(source String, schema_version UInt32, prepared_at DateTime64(3, 'UTC'))
ENGINE = __replicated__ReplacingMergeTree(prepared_at) ORDER BY source
