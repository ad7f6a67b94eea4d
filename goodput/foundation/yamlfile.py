"""Reading a file a user wrote, with ConfigError (file, line, problem) instead of a traceback.

Every way a user file can be unusable — missing, a directory, unreadable, not UTF-8, not YAML,
empty, a list where a mapping belongs, too large, nested too deep — becomes one ``FILE: WHERE: PROBLEM``
line. The limits are checked before the work: the size before the file is read, the depth while the
parser builds each node (PyYAML's composer recurses, so a 40 KB ``x: [[[[…]]]]`` would otherwise end in
``RecursionError``), and the nodes aliases add while the composer meets each one (PyYAML shares an aliased node, so
a 1 KB "billion laughs" costs nothing to load, but every reader that walks the data would visit 10^9 nodes).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Any

import yaml

from goodput.foundation.errors import ConfigError, long_integer

__all__ = ["MAX_ALIAS_NODES", "MAX_DEPTH", "MAX_YAML_BYTES", "load_mapping", "load_yaml", "parse_yaml", "read_bytes",
           "read_text"]

MAX_YAML_BYTES = 8 * 2**20  # the largest hand-written file here is ~12 KB; PyYAML reads ~1 MB/s
MAX_DEPTH = 64  # nesting of mappings and lists; a fleet file needs 6
MAX_ALIAS_NODES = 100_000  # nodes that aliases (*name) add to a document when expanded; hand-written files add dozens


def read_bytes(path: str | Path, limit: int, regular: bool = False) -> bytes:
    """The file's bytes; ``ConfigError`` when it is missing, a directory, unreadable or larger than ``limit``
    (checked by its size before reading, and again while reading, for a file that grows or is a pipe). ``regular``:
    only a regular file, opened without blocking, for a reader that polls a file it does not control (a FIFO put in
    its place would block ``open`` until a writer came, and every read after it)."""
    p = Path(path)
    try:
        with _open(p, regular) as f:
            st = os.fstat(f.fileno())
            if regular and not stat.S_ISREG(st.st_mode):
                raise ConfigError(str(p), "", "not a regular file (a FIFO, socket or device); not read")
            if stat.S_ISREG(st.st_mode) and st.st_size > limit:
                raise ConfigError(str(p), "", f"{st.st_size} bytes is larger than the limit of {limit} bytes")
            data = _read_at_most(f, limit + 1)
    except OSError as e:
        raise ConfigError(str(p), "", f"cannot read: {e.strerror or e}") from None
    if len(data) > limit:
        raise ConfigError(str(p), "", f"larger than the limit of {limit} bytes")
    return data


def _open(p: Path, regular: bool) -> Any:
    if not regular:
        return p.open("rb")
    return os.fdopen(os.open(p, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb")  # no effect on a regular file


def _read_at_most(f: Any, n: int) -> bytes:
    """Up to ``n`` bytes, a MiB at a time: ``f.read(n)`` would allocate all ``n`` up front."""
    out = bytearray()
    while len(out) < n and (chunk := f.read(min(2**20, n - len(out)))):
        out += chunk
    return bytes(out)


def decode(data: bytes, source: str) -> str:
    """``data`` as UTF-8; ``ConfigError`` naming the line and offset of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise ConfigError(source, f"line {line}", f"not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") \
            from None


def read_text(path: str | Path, limit: int = MAX_YAML_BYTES) -> str:
    """The file's text (UTF-8); ``ConfigError`` when it is missing, a directory, unreadable, larger than ``limit``
    or not UTF-8."""
    return decode(read_bytes(path, limit), str(path))


class _Deep(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


class _Aliased(_Deep):
    pass


class _Loader(yaml.SafeLoader):
    """``SafeLoader`` that refuses a node nested deeper than ``MAX_DEPTH``: a ``[`` or ``{`` as the scanner meets it
    (PyYAML scans a flow collection whole before its first event, at a cost that grows with the square of its depth),
    any other node before the composer recurses into it; and a document whose aliases expand it by more than
    ``MAX_ALIAS_NODES`` nodes, counted as each alias is met (a node's expanded size is known once its children are)."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._sizes: dict[int, int] = {}  # id(node) -> its node count with every alias in it expanded
        self._added = 0  # nodes the aliases met so far add

    def fetch_flow_collection_start(self, token_class: Any) -> None:
        if self.flow_level >= MAX_DEPTH:
            raise _Deep(self.get_mark())
        super().fetch_flow_collection_start(token_class)

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Deep(self.peek_event().start_mark)
            alias = self.peek_event() if self.check_event(yaml.AliasEvent) else None
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if alias is not None:
            self._added += self._sizes.get(id(node), 1)
            if self._added > MAX_ALIAS_NODES:
                raise _Aliased(alias.start_mark)
        else:
            self._sizes[id(node)] = _expanded_size(node, self._sizes)
        return node


class _LongInteger(Exception):
    def __init__(self, mark: Any) -> None:
        self.mark = mark


def _construct_int(loader: _Loader, node: Any) -> int:
    """YAML's int constructor, with an integer past Python's digit limit told apart from other errors."""
    try:
        return yaml.SafeLoader.construct_yaml_int(loader, node)
    except ValueError:
        raise _LongInteger(node.start_mark) from None


_Loader.add_constructor("tag:yaml.org,2002:int", _construct_int)


def _expanded_size(node: Any, sizes: dict[int, int]) -> int:
    """1 + the expanded sizes of ``node``'s children (each already composed, so already in ``sizes``)."""
    if isinstance(node, yaml.SequenceNode):
        return 1 + sum(sizes.get(id(c), 1) for c in node.value)
    if isinstance(node, yaml.MappingNode):
        return 1 + sum(sizes.get(id(k), 1) + sizes.get(id(v), 1) for k, v in node.value)
    return 1


def parse_yaml(text: str, source: str) -> Any:
    """YAML ``text`` (from ``source``, for the error) as Python data, safely, nested at most ``MAX_DEPTH`` deep."""
    try:
        loader = _Loader(text)  # its reader refuses unprintable characters already here
        return loader.get_single_data()
    except _Aliased as e:
        raise ConfigError(source, f"line {e.mark.line + 1}",
                          f"aliases expand the document by more than the limit of {MAX_ALIAS_NODES:,} nodes") from None
    except _LongInteger as e:
        raise ConfigError(source, f"line {e.mark.line + 1}", long_integer()) from None
    except _Deep as e:
        raise ConfigError(source, f"line {e.mark.line + 1}",
                          f"nested deeper than the limit of {MAX_DEPTH} mappings and lists") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        problem = getattr(e, "problem", None) or getattr(e, "reason", None) or str(e)
        if isinstance(e, yaml.reader.ReaderError):
            where = f"line {text.count(chr(10), 0, e.position) + 1}"
            problem = f"character {e.character!r} is not allowed ({problem})" if isinstance(e.character, str) \
                else problem
        raise ConfigError(source, where, f"not valid YAML: {' '.join(str(problem).split())}") from None


def load_yaml(path: str | Path) -> Any:
    """A YAML file of at most ``MAX_YAML_BYTES``, nested at most ``MAX_DEPTH`` deep."""
    return parse_yaml(read_text(path), str(path))


def load_mapping(path: str | Path, expected: str) -> dict:
    """A YAML file whose top level must be a mapping; ``expected`` says what it should hold, for the error."""
    data = load_yaml(path)
    if data is None:
        raise ConfigError(str(path), "", f"the file is empty; expected {expected}")
    if not isinstance(data, dict):
        raise ConfigError(str(path), "", f"expected {expected}, got a {_kind(data)}")
    return data


def _kind(v: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number", bool: "boolean"}.get(type(v), type(v).__name__)
