-- The materialized views that keep the model as the Collector inserts spans. Inside a view every reference to the
-- source table reads the insert block: the first copies the block's spans into goodput_spans; the others recompute the
-- model of the traces the block touched from their stored spans (those within an hour of the block's: the span
-- margin reads use, goodput.analyzer.backend.SPAN_MARGIN) UNION ALL the block itself, once per span. Without the
-- block in the union, a view that fires before the first has stored it misses its spans; prepare.py fills __rows_select__.
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__spans___mv __on_cluster__ TO __db__.__spans__
AS __span_select__;
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__requests___mv __on_cluster__ TO __db__.__requests__
AS __requests_view__;
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__early___mv __on_cluster__ TO __db__.__early__
AS __early_view__;
CREATE MATERIALIZED VIEW IF NOT EXISTS __db__.__admission___mv __on_cluster__ TO __db__.__admission__
AS __admission_view__
