"""A ClickHouse to query: a server over HTTP (clickhouse-connect) or the engine in-process (chDB), one interface.

``--db clickhouse://[USER[:PASSWORD]@]HOST[:PORT]/DATABASE[?table=otel_traces&secure=1]`` names a server (HTTP
interface, port 8123 by default, 8443 with ``secure=1``; ``clickhouses://`` is the same with TLS);
``--db chdb:DIR[?database=otel&table=otel_traces]`` a chDB session directory on this machine (created if
missing, its tables persist). Values are always bound as ClickHouse query parameters (``{name:Type}`` in the
SQL), never formatted in.

chDB runs one embedded server per process, with one directory: a second directory in the same process is refused.
Its session is shared by every connection of the process (the console's concurrent page sessions), and a query's
parameters are the session's state while it runs, so its queries run one at a time under ``_CHDB_LOCK`` (without it,
threads' queries picked up one another's parameters: wrong answers, not only errors).

A target's password is never shown: ``Target.__str__`` leaves it out, ``redact`` hides it in the text a user gave
(every error line here quotes that), and a user or password holding a control character (CR/LF would end up in a
request header) is refused when the target is parsed, not at the first insert.
"""

from __future__ import annotations

import logging
import re
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import parse_qs, unquote, urlsplit

import pandas as pd

from goodput.foundation.errors import ConfigError

__all__ = ["DEFAULT_DATABASE", "DEFAULT_TABLE", "Connection", "Statements", "Target", "connect", "ident", "is_clickhouse",
           "param_text", "parse_target", "redact"]

DEFAULT_TABLE = "otel_traces"  # the OpenTelemetry Collector clickhouseexporter's traces_table_name default
DEFAULT_DATABASE = "otel"  # ... and its database default
_SCHEMES = ("clickhouse", "clickhouses")
_QUERY_KEYS = {"table", "secure"}
_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_USERINFO = re.compile(r"^([a-z]+://)([^/?#]*)@", re.IGNORECASE | re.DOTALL)  # up to the last @ before the path
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


@dataclass(frozen=True, slots=True)
class Target:
    """Where the spans are: ``kind`` is ``clickhouse`` (a server) or ``chdb`` (``path``, in-process)."""

    kind: str
    database: str
    table: str = DEFAULT_TABLE
    host: str = ""
    port: int = 0
    user: str = "default"
    password: str = ""
    secure: bool = False
    path: str = ""

    def __str__(self) -> str:  # what error lines name (never the password)
        if self.kind == "chdb":
            return f"chdb:{self.path} ({self.database}.{self.table})"
        scheme = "clickhouses" if self.secure else "clickhouse"
        return f"{scheme}://{self.host}:{self.port}/{self.database}?table={self.table}"


class Statements(Protocol):
    """What writing needs: statements that return nothing (an insert-only client offers no more)."""

    target: Target

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None: ...

    def close(self) -> None: ...


class Connection(Statements, Protocol):
    """The one seam: a statement that returns nothing, a query that returns a frame."""

    def query_df(self, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame: ...


def is_clickhouse(text: str | Path) -> bool:
    """Whether a ``--db`` value names ClickHouse rather than a DuckDB file."""
    s = str(text)
    return s.startswith("chdb:") or any(s.startswith(f"{p}://") for p in _SCHEMES)


def redact(text: str) -> str:
    """``text`` (a ``--db`` / ``--store`` value) as error lines and pages may show it: a URL's user-info reduced to
    ``USER:***`` (the user up to its first ``:``), anything else as it is."""
    m = _USERINFO.match(text)
    if m is None:
        return text
    user, colon, _ = m.group(2).partition(":")
    return f"{m.group(1)}{user}{':***' if colon else ''}@{text[m.end():]}"


def _identifier(value: str, flag: str, text: str, what: str) -> str:
    if not value or not set(value) <= _IDENT_CHARS or value[0].isdigit():
        raise ConfigError(flag, text, f"{what} {value!r} is not a plain identifier (letters, digits, _)")
    return value


def ident(name: str) -> str:
    """A ClickHouse identifier in backquotes, as the Collector's DDL templates quote theirs."""
    return "`" + name.replace("\\", "\\\\").replace("`", "\\`") + "`"


def parse_target(text: str, flag: str = "--db") -> Target:
    """A ``clickhouse://`` URL or ``chdb:DIR`` as a Target, or a one-line ConfigError naming ``flag``."""
    if text.startswith("chdb:"):
        rest, _, query = text[len("chdb:"):].partition("?")
        if not rest:
            raise ConfigError(flag, text, "chdb: needs a directory, like chdb:/var/lib/goodput/chdb")
        database, table = DEFAULT_DATABASE, DEFAULT_TABLE
        opts = _query_options(query, flag, text)
        return Target("chdb", _identifier(opts.get("database", database), flag, text, "database"),
                      _identifier(opts.get("table", table), flag, text, "table"), path=str(Path(rest)))
    shown = redact(text)
    if _CONTROL.search(text):  # urlsplit silently drops CR, LF and tab: a password would lose them unseen
        raise ConfigError(flag, _CONTROL.sub("?", shown), "the URL holds a control character (CR, LF, ...)")
    try:
        u = urlsplit(text)
        port = u.port
    except ValueError as e:
        raise ConfigError(flag, shown, f"not a clickhouse:// URL ({redact(str(e))})") from None
    if u.scheme not in _SCHEMES or not u.hostname:
        raise ConfigError(flag, shown, "expected clickhouse://HOST[:PORT]/DATABASE[?table=otel_traces] or chdb:DIR")
    database = u.path.strip("/")
    if not database or "/" in database:
        raise ConfigError(flag, shown, "the URL's path must be one DATABASE, like clickhouse://host:8123/otel")
    opts = _query_options(u.query, flag, shown)
    secure = u.scheme == "clickhouses" or opts.get("secure", "0") in ("1", "true")
    user, password = unquote(u.username or "default"), unquote(u.password or "")
    if _CONTROL.search(user + password):  # it would be sent in a header (X-ClickHouse-Key): never storable
        raise ConfigError(flag, shown, "the URL's user or password holds a control character (CR, LF, ...)")
    return Target("clickhouse", _identifier(database, flag, shown, "database"),
                  _identifier(opts.get("table", DEFAULT_TABLE), flag, shown, "table"), host=u.hostname,
                  port=port or (8443 if secure else 8123), user=user, password=password, secure=secure)


def _query_options(query: str, flag: str, text: str) -> dict[str, str]:
    opts = parse_qs(query, keep_blank_values=True, strict_parsing=False)
    unknown = sorted(set(opts) - _QUERY_KEYS - {"database"})
    if unknown:
        raise ConfigError(flag, text, f"unknown option {unknown[0]!r} (known: database, secure, table)")
    return {k: v[-1] for k, v in opts.items()}


class _Server:
    """A ClickHouse server through clickhouse-connect (HTTP): parameters are bound server-side."""

    def __init__(self, target: Target, flag: str) -> None:
        import clickhouse_connect
        from clickhouse_connect.driver.exceptions import ClickHouseError

        self.target = target
        log = logging.getLogger("clickhouse_connect")
        level, log.level = log.level, logging.CRITICAL  # its own error line would make two; ours says it all
        try:
            self._client = clickhouse_connect.get_client(
                host=target.host, port=target.port, username=target.user, password=target.password,
                database=target.database, secure=target.secure, connect_timeout=5, send_receive_timeout=300,
                session_id=f"goodput-{uuid.uuid4().hex}")  # its own session: the analyzer's temporary tables
        except (ClickHouseError, OSError) as e:
            raise ConfigError(flag, str(target), f"cannot connect: {_first_line(e)}") from None
        finally:
            log.setLevel(level)

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        self._client.command(sql, parameters=params or None)

    def query_df(self, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        return self._client.query_df(sql, parameters=params or None)

    def close(self) -> None:
        self._client.close()


_CHDB_SESSION: list[Any] = []  # the process's one chDB session (chDB embeds one server per process)
_CHDB_LOCK = threading.Lock()  # ... which runs one query at a time: parameters are its state while a query runs


class _Embedded:
    """ClickHouse's engine in this process (chDB), its data under ``target.path``."""

    def __init__(self, target: Target, flag: str) -> None:
        from chdb import session

        self.target = target
        Path(target.path).mkdir(parents=True, exist_ok=True)
        if _CHDB_SESSION and _CHDB_SESSION[0][0] != target.path:
            raise ConfigError(flag, str(target), f"this process already has chDB open at {_CHDB_SESSION[0][0]} "
                                                 "(one chDB directory per process)")
        if not _CHDB_SESSION:
            try:
                _CHDB_SESSION.append((target.path, session.Session(target.path)))
            except RuntimeError as e:  # chDB's errors (its C++ exceptions, ChdbError) are RuntimeErrors
                raise ConfigError(flag, str(target), f"cannot open: {_first_line(e)}") from None
        self._session = _CHDB_SESSION[0][1]

    def command(self, sql: str, params: dict[str, Any] | None = None) -> None:
        with _CHDB_LOCK:
            self._session.query(sql, params=param_text(params))

    def query_df(self, sql: str, params: dict[str, Any] | None = None) -> pd.DataFrame:
        with _CHDB_LOCK:
            return self._session.query(sql, "DataFrame", params=param_text(params))

    def close(self) -> None:  # the session lives as long as the process: another connection may share it
        pass


def param_text(params: dict[str, Any] | None) -> dict[str, str]:
    """chDB takes parameters as ClickHouse text: escaped strings, booleans as 0/1, lists as [..] of literals."""
    out = {}
    for k, v in (params or {}).items():
        out[k] = _chdb_text(v)
    return out


def _chdb_text(v: Any, nested: bool = False) -> str:
    if isinstance(v, bool):
        return "1" if v else "0"
    if isinstance(v, list | tuple):
        return "[" + ",".join(_chdb_text(x, True) for x in v) + "]"
    if isinstance(v, str):  # a top-level value is read as TSV-escaped text, an array's items as quoted literals
        text = v.replace("\\", "\\\\").replace("\n", "\\n").replace("\t", "\\t")
        return "'" + text.replace("'", "\\'") + "'" if nested else text
    if v is None:
        return "\\N"
    return str(v)


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def connect(target: Target | str, flag: str = "--db") -> Connection:
    """Open ``target`` (a Target, or its ``--db`` text); ConfigError naming ``flag`` if it cannot be reached."""
    t = parse_target(target, flag) if isinstance(target, str) else target
    return _Embedded(t, flag) if t.kind == "chdb" else _Server(t, flag)
