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


@cache
def _table(dialect: str) -> dict[str, tuple[tuple[Rule, int], ...]]:
    table: dict[str, list[tuple[Rule, int]]] = defaultdict(list)
    for rule in DIALECTS[dialect]:
        s = rule.source
        if rule.kind == "counter":
            table[s + "_total"].append((rule, VALUE))
            table[s].append((rule, VALUE))
        elif rule.kind == "histogram":
            for part in (BUCKET, SUM, COUNT):
                table[s + _SUFFIX[part]].append((rule, part))
        elif rule.kind == "sum_as_counter":
            table[s + "_sum"].append((rule, VALUE))
        else:
            table[s].append((rule, VALUE))
    return {k: tuple(v) for k, v in table.items()}


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
    for line in text.splitlines():
        if not line or line[0] == "#":
            continue
        for prefix, dialect in PREFIXES:
            if line.startswith(prefix):
                return dialect
    raise UnknownDialect("no vLLM, SGLang, TGI or Triton/TensorRT-LLM metric in the text")


def normalize(text: str, dialect: str = "auto") -> Normalized:
    """Canonical samples of one engine's exposition text. Raises ``UnknownDialect`` when nothing maps."""
    if dialect == "auto":
        dialect = detect_dialect(text)
    elif dialect not in DIALECTS:
        raise UnknownDialect(f"unknown engine {dialect!r}; use auto, {', '.join(DIALECTS)}")
    table = _table(dialect)
    acc: dict[tuple[str, int], dict[tuple[str, str], float]] = defaultdict(dict)
    errors: dict[str, int] = defaultdict(int)
    trt: dict[str, float] = {}
    model = None
    samples = 0
    label = _label
    ranked = dialect == "sglang"  # SGLang exports one series per TP / PP rank
    for line in text.split("\n"):
        if not line or line[0] == "#":
            continue
        samples += 1
        brace = line.find("{")
        if brace >= 0:
            name = line[:brace]
            entries = table.get(name)
            if entries is None:
                continue
            close = line.rfind("}")
            labels = line[brace + 1:close]
            rest = line[close + 1:]
        else:
            sp = line.find(" ")
            name = line[:sp]
            entries = table.get(name)
            if entries is None:
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
        for rule, part in entries:
            if rule.where is not None and not _has(labels, rule.where):
                continue
            kind = rule.kind
            target = rule.target
            extra = ""
            if kind == "info_capacity":
                blocks, size = label(labels, rule.blocks_label), label(labels, rule.size_label)
                try:
                    value = float(blocks)
                except (TypeError, ValueError):
                    errors["parse"] += 1
                    continue
                extra = f'block_size="{escape(size or "")}"'
            elif kind == "tokens_capacity":
                extra = 'block_size="1"'
            elif kind == "trt_capacity":
                trt[label(labels, "kv_cache_block_type") or ""] = value
                continue
            elif rule.pass_reason or rule.reason:
                reason = rule.reason or label(labels, "finished_reason") or "unknown"
                extra = f'finished_reason="{escape(reason)}"'
            if part == BUCKET:
                le = label(labels, "le")
                if le is None:
                    errors["parse"] += 1
                    continue
                le = le if le == "+Inf" else fmt_float(float(le) * rule.scale)
                extra = f'le="{le}"'
                sample = target + "_bucket"
            elif part == SUM:
                value *= rule.scale
                sample = target + "_sum"
            elif part == COUNT:
                sample = target + "_count"
            else:
                value *= rule.scale
                sample = target
            bucket = acc[(target, rule.priority)]
            key = (sample, extra)
            if key in bucket:
                bucket[key] = max(bucket[key], value) if rule.agg == "max" else bucket[key] + value
            else:
                bucket[key] = value
    if "max" in trt:
        size = trt.get("tokens_per")
        acc[("llm_kv_cache_capacity_blocks", 0)][("llm_kv_cache_capacity_blocks",
                                                  f'block_size="{int(size) if size else ""}"')] = trt["max"]
    families: dict[str, dict[tuple[str, str], float]] = {}
    best: dict[str, int] = {}
    for (target, prio), samples_ in acc.items():
        if target not in best or prio > best[target]:
            best[target] = prio
            families[target] = samples_
    for fam in [f for f, s in families.items() if any(n.endswith("_bucket") for n, _ in s)]:
        if not _complete_histogram(families[fam]):
            del families[fam]
            errors["truncated_histogram"] += 1
    if not families:
        raise UnknownDialect(f"no metric of the {dialect} engine in the text")
    return Normalized(dialect, model, families, samples, dict(errors))


def _has(labels: str, pair: str) -> bool:
    i = labels.find(pair)
    while i >= 0:
        if i == 0 or labels[i - 1] == ",":
            return True
        i = labels.find(pair, i + 1)
    return False


def _complete_histogram(samples: dict[tuple[str, str], float]) -> bool:
    names = {n for n, _ in samples}
    has_inf = any(e == 'le="+Inf"' for n, e in samples if n.endswith("_bucket"))
    return has_inf and any(n.endswith("_count") for n in names) and any(n.endswith("_sum") for n in names)
