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


SECRET = "s3cr3t-pw"


@pytest.mark.parametrize("text", [
    f"clickhouse://alice:{SECRET}@host:99999/otel",  # each error line quotes the text the user gave
    f"clickhouse://alice:{SECRET}@host/a/b",
    f"clickhouse://alice:{SECRET}@host/otel?tabel=x",
    f"clickhouse://alice:{SECRET}@host/1otel",
    f"clickhouse://alice:{SECRET}@/otel",
    f"clickhouse://alice:p@{SECRET}@host:99999/otel",  # an unescaped @ in the password
    f"clickhouse://alice:{SECRET}%0D%0AX-Evil:%201@host/otel",  # CR/LF would end up in the X-ClickHouse-Key header
    f"clickhouse://alice:{SECRET}\r\n@host/otel",  # ... and raw, which urlsplit would silently drop
])
def test_a_password_is_never_in_the_error_line_and_cr_lf_is_refused(text):
    with pytest.raises(ConfigError) as e:
        parse_target(text)
    line = str(e.value)
    assert SECRET not in line and "\n" not in line and "\r" not in line and "alice:***@" in line, line


def test_redact_keeps_the_user_and_everything_but_the_password():
    from goodput.foundation.clickhouse import redact

    assert redact(f"clickhouse://bob:{SECRET}@h:8123/otel?table=t") == "clickhouse://bob:***@h:8123/otel?table=t"
    assert redact("clickhouse://bob@h/otel") == "clickhouse://bob@h/otel"
    assert redact("chdb:/var/lib/x@y") == "chdb:/var/lib/x@y"
    target = parse_target(f"clickhouse://bob:{SECRET}@h/otel")
    assert target.password == SECRET and SECRET not in str(target)


def test_the_exporter_refuses_a_cr_lf_password_at_start_in_one_line(tmp_path):
    import subprocess
    import sys

    from tests.conftest import REPO

    r = subprocess.run([sys.executable, "-m", "goodput", "exporter", "requests", "--store",
                        f"clickhouse://alice:{SECRET}%0A@127.0.0.1:1/otel", "--wal", str(tmp_path / "wal"),
                        "--port", "0", "--otlp-port", "0"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert len(r.stderr.strip().splitlines()) == 1 and SECRET not in r.stderr + r.stdout, r.stderr
    assert "control character" in r.stderr


def test_concurrent_queries_on_the_shared_chdb_session_keep_their_own_parameters(chdb):
    import threading

    wrong: list[tuple] = []

    def worker(k: int) -> None:
        con = connect(f"chdb:{chdb.target.path}")  # each a connection of its own, all on the one session
        for i in range(100):
            try:
                df = con.query_df("SELECT {a:UInt64} AS a, {b:String} AS b", {"a": k * 1000 + i, "b": f"s{k}-{i}"})
                got = (int(df["a"][0]), df["b"][0])
            except RuntimeError as e:  # chDB's errors: a parameter another thread's query unset
                got = (-1, str(e)[:80])
            if got != (k * 1000 + i, f"s{k}-{i}"):
                wrong.append((k, i, got))

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert wrong == [], wrong[:3]
