"""--db clickhouse://... and chdb:DIR: what a URL means, and a one-line error naming --db for one that cannot work."""

import socket

import pytest

from goodput.foundation.clickhouse import Target, connect, is_clickhouse, parse_target
from goodput.foundation.errors import ConfigError


def test_a_clickhouse_url_names_host_port_database_and_table():
    assert parse_target("clickhouse://ch.internal:9000/otel") == Target("clickhouse", "otel", "otel_traces",
                                                                        "ch.internal", 9000)
    t = parse_target("clickhouses://reader:p%40ss@ch.internal/traces?table=spans")
    assert (t.port, t.secure, t.user, t.password, t.database, t.table) == (8443, True, "reader", "p@ss", "traces",
                                                                            "spans")
    assert parse_target("clickhouse://h/otel?secure=1").port == 8443 and parse_target("clickhouse://h/o").port == 8123
    assert "p@ss" not in str(t) and "ch.internal:8443/traces?table=spans" in str(t)


def test_a_chdb_target_is_a_directory_with_the_collectors_default_names():
    t = parse_target("chdb:/var/lib/goodput/ch?table=spans")
    assert (t.kind, t.path, t.database, t.table) == ("chdb", "/var/lib/goodput/ch", "otel", "spans")


def test_only_clickhouse_texts_are_taken_for_clickhouse():
    assert is_clickhouse("clickhouse://h/db") and is_clickhouse("chdb:x") and is_clickhouse("clickhouses://h/d")
    assert not is_clickhouse("db.duckdb") and not is_clickhouse("clickhouse.duckdb")


@pytest.mark.parametrize(("text", "problem"), [
    ("clickhouse://host:8123", "one DATABASE"),
    ("clickhouse://host:8123/a/b", "one DATABASE"),
    ("clickhouse:///otel", "expected clickhouse://"),
    ("clickhouse://host:99999/otel", "not a clickhouse:// URL"),
    ("clickhouse://host/otel?table=x;drop", "not a plain identifier"),
    ("clickhouse://host/1otel", "not a plain identifier"),
    ("clickhouse://host/otel?tabel=x", "unknown option 'tabel'"),
    ("chdb:", "needs a directory"),
])
def test_a_bad_target_is_one_line_naming_db(text, problem):
    with pytest.raises(ConfigError) as e:
        parse_target(text)
    assert str(e.value).startswith("--db: ") and problem in str(e.value) and "\n" not in str(e.value)


def test_an_unreachable_server_is_a_config_error_not_a_traceback():
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConfigError) as e:
        connect(f"clickhouse://127.0.0.1:{port}/otel")
    assert str(e.value).startswith(f"--db: clickhouse://127.0.0.1:{port}/otel") and "cannot connect" in str(e.value)


def test_a_second_chdb_directory_in_one_process_is_refused(chdb, tmp_path):
    with pytest.raises(ConfigError, match="one chDB directory per process"):
        connect(f"chdb:{tmp_path}")
    assert connect(f"chdb:{chdb.target.path}").query_df("SELECT 1 AS x")["x"].tolist() == [1]
