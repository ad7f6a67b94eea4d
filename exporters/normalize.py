"""Normalize one engine's ``/metrics`` text into the canonical ``llm_*`` families. Pure: text in, samples out.

A single pass over the lines: a sample whose name no rule mentions costs one dict lookup and is
skipped (``_created`` families, ``process_*``, unmapped engine metrics); a mapped sample has its
few interesting labels cut out with ``str.find`` rather than a full label parse. Series that differ
only in labels goodput drops (vLLM's ``engine``, SGLang's ``tp_rank``) are combined: SGLang's
per-TP-rank duplicates keep rank 0 only, vLLM's data-parallel engines are summed.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from functools import cache

from exporters.catalog import ENGINE
from exporters.dialects import DIALECTS, PREFIXES, Rule
from exporters.exposition import escape, fmt_float

__all__ = ["Normalized", "UnknownDialect", "detect_dialect", "normalize"]

VALUE, BUCKET, SUM, COUNT = 0, 1, 2, 3
_SUFFIX = {VALUE: "", BUCKET: "_bucket", SUM: "_sum", COUNT: "_count"}


class UnknownDialect(ValueError):
    """The text carries no metric of any engine goodput knows."""


@dataclass
class Normalized:
    dialect: str
    model: str | None
    # canonical family -> {(sample name, extra labels "k=\"v\",..."): value}
    families: dict[str, dict[tuple[str, str], float]]
    samples_in: int = 0
    errors: dict[str, int] = field(default_factory=dict)

    def lines(self, prefix: str) -> dict[str, list[str]]:
        """Sample lines per family with ``prefix`` (the target's labels, already escaped) in front."""
        out = {}
        for fam, samples in self.families.items():
            out[fam] = [f"{name}{{{prefix},{extra}}} {fmt_float(v)}" if extra else f"{name}{{{prefix}}} {fmt_float(v)}"
                        for (name, extra), v in samples.items()]
        return out


@dataclass(frozen=True, slots=True)
class _Op:
    """One rule applied to one sample name, with everything the hot loop needs precomputed."""

    slot: int  # index of (target family, priority) in the dialect's slot list
    sample: str  # canonical sample name written
    part: int
    special: int  # 0 plain, 1 info_capacity, 2 tokens_capacity, 3 trt_capacity
    scale: float
    where: str | None
    extra: str  # fixed extra labels ('finished_reason="stop"', 'block_size="1"') or ""
    pass_reason: bool
    agg_max: bool
    rule: Rule


_SPECIAL = {"info_capacity": 1, "tokens_capacity": 2, "trt_capacity": 3}


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
            f'finished_reason="{rule.reason}"' if rule.reason else "")

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
    raise UnknownDialect("no vLLM, SGLang, TGI or Triton/TensorRT-LLM metric in the text")


def normalize(text: str, dialect: str = "auto") -> Normalized:
    """Canonical samples of one engine's exposition text. Raises ``UnknownDialect`` when nothing maps."""
    if dialect == "auto":
        dialect = detect_dialect(text)
    elif dialect not in DIALECTS:
        raise UnknownDialect(f"unknown engine {dialect!r}; use auto, {', '.join(DIALECTS)}")
    table, slots = _table(dialect)
    acc: list[dict[tuple[str, str], float]] = [{} for _ in slots]
    errors: dict[str, int] = defaultdict(int)
    trt: dict[str, float] = {}
    model = None
    samples = 0
    label = _label
    les = _LE_CACHE
    ranked = dialect == "sglang"  # SGLang exports one series per TP / PP rank
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        samples += 1
        brace = line.find("{")
        if brace >= 0:
            ops = table.get(line[:brace])
            if ops is None:
                continue
            close = line.rfind("}")
            labels = line[brace + 1:close]
            rest = line[close + 1:]
        else:
            sp = line.find(" ")
            ops = table.get(line[:sp])
            if ops is None:
                continue
            labels = ""
            rest = line[sp:]
        try:
            value = float(rest)
        except ValueError:
            try:
                value = float(rest.split()[0])  # a timestamp follows the value
            except (ValueError, IndexError):
                errors["parse"] += 1
                continue
        if labels:
            if ranked and ("tp_rank=" in labels or "pp_rank=" in labels) and (
                    label(labels, "tp_rank") not in (None, "0") or label(labels, "pp_rank") not in (None, "0")):
                continue
            if model is None:
                model = label(labels, "model_name") or label(labels, "model")
        for op in ops:
            if op.where is not None and not _has(labels, op.where):
                continue
            extra = op.extra
            v = value
            part = op.part
            if part == BUCKET:
                i = labels.find('le="')
                while i > 0 and labels[i - 1] != ",":
                    i = labels.find('le="', i + 1)
                if i < 0:
                    errors["parse"] += 1
                    continue
                raw = labels[i + 4:labels.find('"', i + 4)]
                extra = les.get((raw, op.scale))
                if extra is None:
                    try:
                        le = "+Inf" if raw == "+Inf" else fmt_float(float(raw) * op.scale)
                        extra = les[(raw, op.scale)] = f'le="{le}"'
                    except ValueError:
                        errors["parse"] += 1
                        continue
            elif op.special:
                if op.special == 1:
                    try:
                        v = float(label(labels, op.rule.blocks_label))
                    except (TypeError, ValueError):
                        errors["parse"] += 1
                        continue
                    extra = f'block_size="{escape(label(labels, op.rule.size_label) or "")}"'
                elif op.special == 3:
                    trt[label(labels, "kv_cache_block_type") or ""] = value
                    continue
            else:
                if part != COUNT:
                    v = value * op.scale
                if op.pass_reason:
                    extra = f'finished_reason="{escape(label(labels, "finished_reason") or "unknown")}"'
            bucket = acc[op.slot]
            key = (op.sample, extra)
            old = bucket.get(key)
            if old is None:
                bucket[key] = v
            else:
                bucket[key] = max(old, v) if op.agg_max else old + v
    if "max" in trt:
        size = trt.get("tokens_per")
        slot = slots.index(("llm_kv_cache_capacity_blocks", 0))
        acc[slot][("llm_kv_cache_capacity_blocks", f'block_size="{int(size) if size else ""}"')] = trt["max"]
    families: dict[str, dict[tuple[str, str], float]] = {}
    best: dict[str, int] = {}
    for (target, prio), samples_ in zip(slots, acc, strict=True):
        if samples_ and (target not in best or prio > best[target]):
            best[target] = prio
            families[target] = samples_
    for fam in [f for f in families if f in _HISTOGRAMS]:
        got = families[fam]
        if (fam + "_bucket", 'le="+Inf"') not in got or (fam + "_count", "") not in got or (fam + "_sum", "") not in got:
            del families[fam]  # a truncated histogram would break histogram_quantile; drop it whole
            errors["truncated_histogram"] += 1
    if not families:
        raise UnknownDialect(f"no metric of the {dialect} engine in the text")
    return Normalized(dialect, model, families, samples, dict(errors))


_LE_CACHE: dict[tuple[str, float], str] = {}
_HISTOGRAMS = frozenset(m.name for m in ENGINE if m.type == "histogram")


def _has(labels: str, pair: str) -> bool:
    i = labels.find(pair)
    while i >= 0:
        if i == 0 or labels[i - 1] == ",":
            return True
        i = labels.find(pair, i + 1)
    return False
