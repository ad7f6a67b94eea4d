-- The materialized views on the Collector's table: each transforms the insert block only (inside a view every
-- reference to the source table, __table__, reads the block) and reads no stored table, so an insert costs a
-- projection of its own spans. The first copies the block's spans into goodput_spans; the second notes the traces
-- it touched (their first and last span start, and when) in goodput_touched, which the sync (prepare/touched.sql)
-- reads to bring the model tables up to date before a read.
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__spans___mv __on_cluster__ TO __db__.__spans__
AS __span_select__;
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__touched___mv __on_cluster__ TO __db__.__touched__
AS __touched_select__
