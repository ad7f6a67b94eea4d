"""Normalize one engine's ``/metrics`` text into the canonical ``llm_*`` families. Pure: text in, samples out.

A single pass over the lines: a sample whose name no rule mentions costs one dict lookup and is
skipped (``_created`` families, ``process_*``, unmapped engine metrics); a mapped sample has its
few interesting labels cut out with ``str.find`` rather than a full label parse, and a histogram's bucket lines
after a series' first reuse its parse (only ``le`` and the value are read); a large body's runs of families no
rule reads are counted, not split (see ``_runs``). Series that differ
only in labels goodput drops (vLLM's ``engine``, SGLang's ``tp_rank``) are combined: SGLang's
per-TP-rank duplicates keep rank 0 only, vLLM's data-parallel engines are summed.

What a hostile or broken engine can send is bounded: a series repeated in one body keeps its last
sample (counted as ``duplicate_series``, never summed); series of several ``model_name`` values are
kept apart, one group per model; a label value copied into the output longer than
``MAX_LABEL_VALUE_BYTES`` is cut to a prefix, ``…`` and a digest of the whole value (counted as
``label_truncated``), so distinct values stay distinct and one huge label cannot blow up ``/metrics``; and one
body may publish at most ``MAX_SERIES_PER_TARGET`` canonical series (``TooManySeries`` as the one more is met, so
an engine inventing a ``model_name`` per sample costs the exporter nothing beyond the limit).
"""

from __future__ import annotations

import hashlib
import math
from collections import defaultdict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from functools import cache

from goodput.contracts.catalog import ENGINE
from goodput.exporters.dialects import DIALECTS, PREFIXES, RANKED, Rule
from goodput.exporters.exposition import escape, fmt_float

__all__ = ["MAX_LABEL_VALUE_BYTES", "MAX_SERIES_PER_TARGET", "Normalized", "TooManySeries", "UnknownDialect",
           "cap_label", "detect_dialect", "normalize"]

MAX_LABEL_VALUE_BYTES = 256  # an engine's label value longer than this is cut (see cap_label)
MAX_SERIES_PER_TARGET = 10_000  # canonical series one engine's body may yield (a vLLM serving one model: ~400)
_DIGEST_HEX = 8

VALUE, BUCKET, SUM, COUNT = 0, 1, 2, 3
_SUFFIX = {VALUE: "", BUCKET: "_bucket", SUM: "_sum", COUNT: "_count"}


class UnknownDialect(ValueError):
    """The text carries no metric of any engine goodput knows."""


class TooManySeries(ValueError):
    """The text would yield more than ``MAX_SERIES_PER_TARGET`` canonical series."""


Families = dict[str, dict[tuple[str, str], float]]  # canonical family -> {(sample, extra labels): value}


@dataclass
class Normalized:
    dialect: str
    model: str | None  # the first model the engine names (None: it names none)
    # the first model's series: canonical family -> {(sample name, extra labels "k=\"v\",..."): value}
    families: Families
    samples_in: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    others: dict[str, Families] = field(default_factory=dict)  # series of every further model, by model

    def lines(self, prefix: str) -> dict[str, list[str]]:
        """The first model's sample lines per family with ``prefix`` (labels, already escaped) in front."""
        out: dict[str, list[str]] = {}
        _render_into(out, self.families, prefix)
        return out

    def lines_by_model(self, prefix_for: Callable[[str], str]) -> dict[str, list[str]]:
        """Every model's sample lines; ``prefix_for(model)`` gives each model's labels (model "" when unnamed)."""
        out: dict[str, list[str]] = {}
        _render_into(out, self.families, prefix_for(self.model or ""))
        for model, fams in self.others.items():
            _render_into(out, fams, prefix_for(model))
        return out


def _render_into(out: dict[str, list[str]], families: Families, prefix: str) -> None:
    fmt = fmt_float
    for fam, samples in families.items():
        out.setdefault(fam, []).extend([
            f"{name}{{{prefix},{extra}}} {fmt(v)}" if extra else f"{name}{{{prefix}}} {fmt(v)}"
            for (name, extra), v in samples.items()])


def cap_label(value: str) -> str:
    """``value`` if it fits ``MAX_LABEL_VALUE_BYTES``, else a prefix, ``…`` and 8 hex digits of its BLAKE2b."""
    if len(value) * 4 <= MAX_LABEL_VALUE_BYTES:  # cheap: no UTF-8 character is longer than 4 bytes
        return value
    raw = value.encode("utf-8", "surrogatepass")
    if len(raw) <= MAX_LABEL_VALUE_BYTES:
        return value
    digest = hashlib.blake2b(raw, digest_size=_DIGEST_HEX // 2).hexdigest()
    keep = MAX_LABEL_VALUE_BYTES - len("…".encode()) - _DIGEST_HEX
    return raw[:keep].decode("utf-8", "ignore") + "…" + digest


@dataclass(frozen=True, slots=True)
class _Op:
    """One rule applied to one sample name, with everything the hot loop needs precomputed."""

    slot: int  # index of (target family, priority) in the dialect's slot list
    sample: str  # canonical sample name written
    part: int
    special: int  # 0 plain, else one of _SPECIAL's kinds
    scale: float
    where: str | None
    extra: str  # fixed extra labels ('finished_reason="stop"', 'block_size="1"') or ""
    pass_reason: bool
    agg_max: bool
    rule: Rule


_INFO_CAPACITY, _TOKENS_CAPACITY, _TRT_CAPACITY = 1, 2, 3
_SPECIAL = {"info_capacity": _INFO_CAPACITY, "tokens_capacity": _TOKENS_CAPACITY, "trt_capacity": _TRT_CAPACITY}


@cache
def _table(dialect: str) -> tuple[dict[str, tuple[_Op, ...]], tuple[tuple[str, int], ...]]:
    """Sample name -> operations, and the (target family, priority) slots they write to."""
    slots: list[tuple[str, int]] = []
    table: dict[str, list[_Op]] = defaultdict(list)
    for rule in DIALECTS[dialect]:
        key = (rule.target, rule.priority)
        if key not in slots:
            slots.append(key)
        slot = slots.index(key)
        extra = 'block_size="1"' if rule.kind == "tokens_capacity" else (
            f'{rule.reason_label}="{rule.reason}"' if rule.reason else "")

        def op(part: int, sample: str, rule=rule, slot=slot, extra=extra) -> _Op:
            return _Op(slot, sample, part, _SPECIAL.get(rule.kind, 0), rule.scale, rule.where, extra,
                       rule.pass_reason, rule.agg == "max", rule)

        s, t = rule.source, rule.target
        if rule.kind == "counter":
            table[s + "_total"].append(op(VALUE, t))
            table[s].append(op(VALUE, t))
        elif rule.kind == "histogram":
            for part in (BUCKET, SUM, COUNT):
                table[s + _SUFFIX[part]].append(op(part, t + _SUFFIX[part]))
        elif rule.kind == "sum_as_counter":
            table[s + "_sum"].append(op(VALUE, t))
        else:
            table[s].append(op(VALUE, t))
    return {k: tuple(v) for k, v in table.items()}, tuple(slots)


def _label(labels: str, name: str) -> str | None:
    """The value of label ``name`` in a ``k="v",...`` string (no full parse), or None."""
    key = name + '="'
    i = labels.find(key)
    while i > 0 and labels[i - 1] != ",":
        i = labels.find(key, i + 1)
    if i < 0:
        return None
    start = i + len(key)
    j = labels.find('"', start)
    while j > 0 and labels[j - 1] == "\\":
        j = labels.find('"', j + 1)
    if j < 0:
        return None
    v = labels[start:j]
    return v.replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\") if "\\" in v else v


def detect_dialect(text: str) -> str:
    """The engine of the first sample line that names one (lines are scanned lazily, not split)."""
    pos, n = 0, len(text)
    while pos < n:
        end = text.find("\n", pos)
        end = n if end < 0 else end
        if end > pos and text[pos] != "#":
            for prefix, dialect in PREFIXES:
                if text.startswith(prefix, pos):
                    return dialect
        pos = end + 1
    raise UnknownDialect("no vLLM, SGLang, TGI, Triton/TensorRT-LLM or Dynamo metric in the text "
                         "(KServe's kserve_-prefixed names included)")


def normalize(text: str, dialect: str = "auto") -> Normalized:
    """Canonical samples of one engine's exposition text. Raises ``UnknownDialect`` when nothing maps.

    A series that appears twice keeps its last sample and counts as ``duplicate_series`` (summing two copies
    of one counter would invent traffic). Bodies without one are read in one pass; the first repeat sends the
    body through ``_last_of_each`` and reads it again.
    """
    if dialect == "auto":
        dialect = detect_dialect(text)
    elif dialect not in DIALECTS:
        raise UnknownDialect(f"unknown engine {dialect!r}; use auto, {', '.join(DIALECTS)}")
    table, slots = _table(dialect)
    ranked = dialect in RANKED  # SGLang exports one series per TP / PP rank
    errors: dict[str, int] = defaultdict(int)
    try:
        body = _Accumulator(dialect, ranked, errors, check_repeats=True)
        body.read(text)
        samples = body.samples
    except _Repeated:
        errors = defaultdict(int)
        unique, samples, repeats = _last_of_each(text.split("\n"), table)
        if repeats:  # none: only a series split by other lines (read again in case it repeats)
            errors["duplicate_series"] = repeats
        body = _Accumulator(dialect, ranked, errors, check_repeats=False)
        body.read("\n".join(unique))
    acc, trt = body.acc, body.trt
    if "max" in trt:
        size = trt.get("tokens_per")
        slot = slots.index(("llm_kv_cache_capacity_blocks", 0))
        acc[slot].setdefault("", {})[("llm_kv_cache_capacity_blocks", f'block_size="{int(size) if size else ""}"')] = trt["max"]
    families, others = _choose(slots, acc, errors)
    if not families and not others:
        raise UnknownDialect(f"no metric of the {dialect} engine in the text")
    return Normalized(dialect, body.model, families, samples, dict(errors), others)


class _Repeated(Exception):
    """A series appears twice in the body (see ``normalize``)."""


def _runs(text: str, live: frozenset[str]) -> Iterator[list[str] | int]:
    """The body's runs of sample lines between comment lines: a run whose every line starts with a name that no
    rule's name starts with is only counted (an int, its samples: most of an engine's families, skipped in C);
    the others come split into lines. Exact for any body: the test counts line starts, it trusts no TYPE line."""
    n = len(text)
    while n and text[n - 1] == "\n":
        n -= 1
    pos = 0
    while pos < n:
        if text[pos] == "#":
            pos = text.find("\n", pos, n) + 1 or n
            continue
        end = text.find("\n#", pos, n)
        end = n if end < 0 else end
        eol = text.find("\n", pos, end)
        first = text[pos:end if eol < 0 else eol]
        name = first[:first.find(" ")].partition("{")[0]
        base = name.removesuffix("_bucket").removesuffix("_count").removesuffix("_sum").removesuffix("_total")
        if base and base not in live:
            lines = text.count("\n", pos, end) + 1
            if text.count("\n" + base, pos, end) + 1 == lines:
                yield lines
                pos = end + 1
                continue
        yield text[pos:end].split("\n")
        pos = end + 1


_RUNS_MIN_CHARS = 256 * 1024  # a body smaller (one replica's: ~40 KB) has few lines per family: read line by line


@cache
def _live_prefixes(dialect: str) -> frozenset[str]:
    """Every prefix of a sample name some rule of ``dialect`` reads (see ``_runs``)."""
    return frozenset(k[:i] for k in _table(dialect)[0] for i in range(1, len(k) + 1))


class _Accumulator:
    """One pass over a body: per slot and model group, (sample name, extra labels) -> value; TRT-LLM's KV figures,
    the first model named and the sample count. ``ranked``: SGLang's series repeat per TP / PP rank; only rank 0 is
    read. ``check_repeats``: a series met twice raises ``_Repeated`` (see ``normalize``)."""

    __slots__ = ("acc", "capped", "dialect", "errors", "last_group", "last_inner", "last_token", "model", "ranked",
                 "samples", "seen", "series", "series_seen", "table", "trt")

    def __init__(self, dialect: str, ranked: bool, errors: dict[str, int], check_repeats: bool) -> None:
        self.dialect, self.ranked, self.errors = dialect, ranked, errors
        self.table, slots = _table(dialect)
        self.acc: list[dict[str, dict[tuple[str, str], float]]] = [{} for _ in slots]  # per slot, per model group
        self.trt: dict[str, float] = {}
        self.capped: dict[str, str] = {}
        self.model: str | None = None
        # the model_name label of the last sample that named one, and its group (see _sample)
        self.last_token = self.last_inner = self.last_group = ""
        self.seen: set[str] | None = set() if check_repeats else None  # sample keys read the long way
        self.series_seen: set[str] | None = set() if check_repeats else None  # histogram series met
        self.samples = self.series = 0

    def read(self, text: str) -> None:
        """Every sample line of ``text``. The hot loop: a line no rule reads costs a name lookup; a histogram
        series' bucket lines differ only in ``le``, so after its first, each line whose text around ``le`` matches
        (head, tail) reuses that line's parse (its ops, model group, labels) and only reads ``le`` and the value;
        the series' samples are applied together as it ends."""
        table, parse, apply, checking = self.table, self._sample, self._apply, self.seen is not None
        head, tail, hl, tl = "\n", "", 1, 0
        fast_ops: tuple[_Op, ...] = ()
        fast_group = fast_labels = ""
        les_seen: set[str] | None = None  # the le values met in the current series (checking repeats)
        pending: list[tuple[float, str]] = []  # the current series' (value, le) not yet applied
        samples = 0
        runs = _runs(text, _live_prefixes(self.dialect)) if len(text) > _RUNS_MIN_CHARS else (text.split("\n"),)
        for run in runs:
            if isinstance(run, int):
                samples += run
                continue
            for line in run:
                if not line or line[0] == "#":
                    continue
                samples += 1
                if line.startswith(head) and (j := line.find('"', hl)) > 0 and line.startswith(tail, j):
                    try:
                        value = float(line[j + tl:])
                    except ValueError:  # a timestamp follows the value: read it the long way
                        pass
                    else:
                        raw = line[hl:j]
                        if les_seen is not None:
                            if raw in les_seen:
                                raise _Repeated
                            les_seen.add(raw)
                        pending.append((value, raw))
                        continue
                if pending:
                    apply(fast_ops, fast_group, fast_labels, pending)
                    pending = []
                brace = line.find("{")
                ops = table.get(line[:brace] if brace >= 0 else line[:line.find(" ")])
                if ops is None:
                    continue
                sample = parse(line, brace)
                if sample is None:
                    continue
                group, labels, value = sample
                if ops[0].part == BUCKET and (first := self._bucket_series(line, brace, labels)) is not None:
                    raw, head, tail = first
                    hl, tl = len(head), len(tail)
                    les_seen = {raw} if checking else None
                    fast_ops, fast_group, fast_labels, pending = ops, group, labels, [(value, raw)]
                    continue
                apply(ops, group, labels, ((value, ""),))
        if pending:
            apply(fast_ops, fast_group, fast_labels, pending)
        self.samples = samples

    def _sample(self, line: str, brace: int) -> tuple[str, str, float] | None:
        """A mapped sample line read the long way: its model group (see ``_model_group``), labels and value; None
        when it is skipped (a value that is no number, counted as ``parse``; an SGLang rank other than 0)."""
        if brace >= 0:
            close = line.rfind("}")
            key, labels, rest = line[:close + 1], line[brace + 1:close], line[close + 1:]
        else:
            sp = line.find(" ")
            key, labels, rest = line[:sp], "", line[sp:]
        if self.seen is not None:
            if key in self.seen:
                raise _Repeated
            self.seen.add(key)
        try:
            value = float(rest)
        except ValueError:
            try:
                value = float(rest.split()[0])  # a timestamp follows the value
            except (ValueError, IndexError):
                self.errors["parse"] += 1
                return None
        if not labels:
            return "", labels, value
        if self.ranked and ("tp_rank=" in labels or "pp_rank=" in labels) and (
                _label(labels, "tp_rank") not in (None, "0") or _label(labels, "pp_rank") not in (None, "0")):
            return None
        # the model_name of the sample before is usually this one's: a substring test, not a parse
        if self.last_token and (labels.startswith(self.last_token) or self.last_inner in labels):
            return self.last_group, labels, value
        return self._model_group(labels), labels, value

    def _model_group(self, labels: str) -> str:
        """The model group of a labelled sample ("" for the first model named, or none), parsed from its labels."""
        named = _label(labels, "model_name")
        if self.model is None:
            found = named if named is not None else _label(labels, "model")
            self.model = self._cap(found) if found else None
        if named is None:
            return ""
        capped = self._cap(named)
        self.last_group = "" if capped == self.model else capped
        self.last_token = f'model_name="{escape(named)}"'
        self.last_inner = "," + self.last_token
        return self.last_group

    def _bucket_series(self, line: str, brace: int, labels: str) -> tuple[str, str, str] | None:
        """The first bucket line of a series: its ``le`` text and the line's text before and after it, which the
        series' next lines share; None without ``le``. Checking repeats, a series met again after other lines
        raises ``_Repeated`` (it is then read the long way)."""
        i = _le_at(labels)
        q = labels.find('"', i + 4) if i >= 0 else -1
        if q < 0:
            return None
        head, tail = line[:brace + i + 5], line[brace + 1 + q:line.rfind("}") + 1]
        if self.series_seen is not None:
            if head + tail in self.series_seen:
                raise _Repeated
            self.series_seen.add(head + tail)
        return labels[i + 4:q], head, tail

    def _apply(self, ops: tuple[_Op, ...], group: str, labels: str, samples: Sequence[tuple[float, str]]) -> None:
        """Add one series' samples, (value, ``le`` text) pairs, to what each of its rules writes (summed, or the max
        for ``agg: max``). The ``le`` text is "" but in a bucket line; a bucket rule counts "" as ``parse``, as
        it does ``le=""``."""
        acc = self.acc
        for value, raw in samples:
            for op in ops:
                if op.where is not None and not _has(labels, op.where):
                    continue
                if op.part == BUCKET:
                    v = value
                    extra = _LE_CACHE.get((raw, op.scale)) or self._le_label(raw, op.scale)
                    if extra is None:
                        continue
                elif op.special:
                    special = self._special(op, labels, value)
                    if special is None:
                        continue
                    v, extra = special
                else:
                    v = value if op.part == COUNT else value * op.scale
                    extra = (f'finished_reason="{escape(self._cap(_label(labels, "finished_reason") or "unknown"))}"'
                             if op.pass_reason else op.extra)
                groups = acc[op.slot]
                bucket = groups.get(group)
                if bucket is None:
                    bucket = groups[group] = {}
                key = (op.sample, extra)
                old = bucket.get(key)
                if old is None:
                    self.series += 1
                    if self.series > MAX_SERIES_PER_TARGET:
                        raise TooManySeries(f"more than {MAX_SERIES_PER_TARGET} series (label values such as "
                                            f"model_name {group!r} keep adding new ones)")
                    bucket[key] = v
                else:
                    bucket[key] = max(old, v) if op.agg_max else old + v

    def _le_label(self, raw: str, scale: float) -> str | None:
        """``le="..."`` of a bound not in the cache yet, in the canonical unit; None (counted) when it is no number."""
        try:
            le = "+Inf" if raw == "+Inf" else fmt_float(scaled_bound(raw, scale))
        except (ValueError, InvalidOperation):
            self.errors["parse"] += 1
            return None
        extra = f'le="{le}"'
        if len(_LE_CACHE) < _LE_CACHE_MAX:
            _LE_CACHE[(raw, scale)] = extra
        return extra

    def _special(self, op: _Op, labels: str, value: float) -> tuple[float, str] | None:
        """The value and extra labels of a capacity rule; None when there is nothing to add: a block count that
        is no number (counted as ``parse``), or TRT-LLM's KV figures, kept aside for ``normalize``."""
        if op.special == _TRT_CAPACITY:
            self.trt[_label(labels, "kv_cache_block_type") or ""] = value
            return None
        if op.special == _TOKENS_CAPACITY:
            return value, op.extra
        blocks = _label(labels, op.rule.blocks_label)  # info_capacity: the count and block size are labels
        try:
            count = float(blocks) if blocks is not None else None
        except ValueError:
            count = None
        if count is None:
            self.errors["parse"] += 1
            return None
        return count, f'block_size="{escape(self._cap(_label(labels, op.rule.size_label) or ""))}"'

    def _cap(self, value: str) -> str:
        """``cap_label`` of a label value copied into the output, once per distinct value (counted when cut)."""
        out = self.capped.get(value)
        if out is None:
            out = self.capped[value] = cap_label(value)
            if out is not value:
                self.errors["label_truncated"] += 1
        return out


def _last_of_each(lines: list[str], table: dict[str, tuple[_Op, ...]]) -> tuple[list[str], int, int]:
    """The last line of every mapped series (in first-seen order), the sample count, and how many repeats."""
    last: dict[str, str] = {}
    samples = mapped = 0
    for line in lines:
        if not line or line[0] == "#":
            continue
        samples += 1
        brace = line.find("{")
        name = line[:brace] if brace >= 0 else line[:line.find(" ")]
        if name in table:
            last[line[:line.rfind("}") + 1] if brace >= 0 else name] = line
            mapped += 1
    return list(last.values()), samples, mapped - len(last)


def _choose(slots: tuple[tuple[str, int], ...], acc: list[dict[str, dict[tuple[str, str], float]]],
            errors: dict[str, int]) -> tuple[Families, dict[str, Families]]:
    """Per family the highest-priority source that has samples, split by model group; incomplete histograms go."""
    chosen: dict[str, dict[str, dict[tuple[str, str], float]]] = {}
    best: dict[str, int] = {}
    for (target, prio), got in zip(slots, acc, strict=True):
        if got and (target not in best or prio > best[target]):
            best[target] = prio
            chosen[target] = got
    groups: dict[str, Families] = {}
    for fam, by_group in chosen.items():
        for group, samples in by_group.items():
            groups.setdefault(group, {})[fam] = samples
    for fams in groups.values():
        for fam in [f for f in fams if f in _HISTOGRAMS]:
            samples = fams[fam]
            if ((fam + "_bucket", 'le="+Inf"') not in samples or (fam + "_count", "") not in samples
                    or (fam + "_sum", "") not in samples):
                del fams[fam]  # a truncated histogram would break histogram_quantile; drop it whole
                errors["truncated_histogram"] += 1
    families = groups.pop("", {})
    return families, {m: f for m, f in groups.items() if f}


_LE_CACHE: dict[tuple[str, float], str] = {}
_LE_CACHE_MAX = 4096  # bucket bounds seen across all targets; a hostile engine cannot grow it without end
_HISTOGRAMS = frozenset(m.name for m in ENGINE if m.type == "histogram")


def scaled_bound(raw: str, scale: float) -> float:
    """A bucket bound in the canonical unit. A decimal scale shifts the digits (``700`` ms is ``0.7`` s, as the
    recording rules write it), where multiplying would give ``0.7000000000000001`` and a second ``le`` series."""
    shift = round(math.log10(scale)) if scale > 0 else 0
    if scale != 1 and 10.0 ** shift == scale:
        return float(Decimal(raw).scaleb(shift))
    return float(raw) * scale


def _le_at(labels: str) -> int:
    """Where the ``le="`` of a ``k="v",...`` string starts (a label name, not the tail of another's), or -1."""
    i = labels.find('le="')
    while i > 0 and labels[i - 1] != ",":
        i = labels.find('le="', i + 1)
    return i


def _has(labels: str, pair: str) -> bool:
    i = labels.find(pair)
    while i >= 0:
        if i == 0 or labels[i - 1] == ",":
            return True
        i = labels.find(pair, i + 1)
    return False
