-- goodput_meta: which preparation a database holds (goodput/analyzer/backend.py reads the tables only when its
-- schema_version is SCHEMA_VERSION and its source the table it was asked for); goodput_synced: up to which insert
-- (goodput_touched.at) the model tables hold every trace's model, a row per sync, the newest kept.
CREATE TABLE IF NOT EXISTS __db__.__meta__ __on_cluster__
(source String, schema_version UInt32, prepared_at DateTime64(3, 'UTC'))
ENGINE = __replicated__ReplacingMergeTree(prepared_at) ORDER BY source;
CREATE TABLE IF NOT EXISTS __db__.__synced__ __on_cluster__
(source String, synced_to DateTime64(6, 'UTC'))
ENGINE = __replicated__ReplacingMergeTree(synced_to) ORDER BY source
