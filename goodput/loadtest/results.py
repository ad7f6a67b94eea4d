"""A run directory: ``requests.parquet`` (one row per request) and ``summary.json`` (schema ``goodput.loadtest/1``).

Both files are written to a temporary name and renamed, so a reader never sees half a run. Reading checks
the schema and names the file and key that are wrong in one ``ConfigError`` line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import load_json
from goodput.loadtest.records import RequestRecord
from goodput.loadtest.slo import Slo, SloTerm

__all__ = [
    "REQUESTS_FILE", "SCHEMA", "SUMMARY_FILE",
    "new_summary", "read_run", "records_from_table", "records_table", "slo_of", "write_run",
]

SCHEMA = "goodput.loadtest/1"
REQUESTS_FILE = "requests.parquet"
SUMMARY_FILE = "summary.json"

_ARROW = pa.schema([
    ("index", pa.int64()), ("step", pa.int64()), ("scheduled_s", pa.float64()), ("sent_s", pa.float64()),
    ("first_token_s", pa.float64()), ("done_s", pa.float64()), ("itl_s", pa.list_(pa.float64())),
    ("input_tokens", pa.int64()), ("output_tokens", pa.int64()), ("status", pa.int64()), ("error", pa.string()),
    ("tenant", pa.string()), ("tier", pa.string()), ("route", pa.string()), ("trace_id", pa.string()),
    ("ttft_s", pa.float64()), ("tpot_s", pa.float64()), ("e2e_s", pa.float64()), ("meets_slo", pa.bool_()),
])
_RECORD_FIELDS = [f for f in _ARROW.names if f not in ("ttft_s", "tpot_s", "e2e_s", "meets_slo")]


def new_summary(tool: str = "goodput") -> dict:
    """A summary with every key of the schema at its empty value, for a producer to fill in."""
    return {
        "schema": SCHEMA, "tool": tool, "complete": True, "valid": True, "invalid_reasons": [],
        "comparability": {
            "model": "", "quantization": "", "framework": "", "framework_version": "", "hardware": "",
            "tensor_parallel": 1, "prompt_template": "", "cache_state": "", "input_tokens": {}, "output_tokens": {},
            "arrival": {}, "concurrency_steps": [], "slo": "",
        },
        "slo": {"terms": []},
        "client": {},
        "steps": [],
        "knee": None,
        "faults": [],
    }


def records_table(records: list[RequestRecord], slo: Slo | None) -> pa.Table:
    """The records as an Arrow table with the derived latencies and whether each meets ``slo`` (null without one)."""
    cols: dict[str, list] = {name: [] for name in _ARROW.names}
    for r in records:
        for name in _RECORD_FIELDS:
            cols[name].append(getattr(r, name))
        cols["ttft_s"].append(r.ttft_s)
        cols["tpot_s"].append(r.tpot_s)
        cols["e2e_s"].append(r.e2e_s)
        cols["meets_slo"].append(None if slo is None else slo.meets(r))
    return pa.table(cols, schema=_ARROW)


def records_from_table(table: pa.Table) -> list[RequestRecord]:
    """The ``RequestRecord``s back from a requests table (derived columns are recomputed, not read)."""
    rows = table.select(_RECORD_FIELDS).to_pylist()
    return [RequestRecord(**row) for row in rows]


def _replace(path: Path, write) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    write(tmp)
    os.replace(tmp, path)


def slo_of(summary: dict) -> Slo | None:
    """The SLO a summary was measured against (its ``slo.terms``), or None when it has none."""
    terms = (summary.get("slo") or {}).get("terms") or []
    return Slo(tuple(SloTerm(t["metric"], float(t["percentile"]), float(t["threshold_s"])) for t in terms)) if terms else None


def write_run(run_dir: str | Path, records: list[RequestRecord] | None, summary: dict) -> Path:
    """Write ``summary.json`` and, when there are per-request records, ``requests.parquet`` (``meets_slo`` against
    the summary's SLO); returns the run dir."""
    run = Path(run_dir)
    slo = slo_of(summary)
    run.mkdir(parents=True, exist_ok=True)
    if summary.get("schema") != SCHEMA:
        raise ValueError(f"summary schema must be {SCHEMA!r}")
    if records is not None:
        table = records_table(records, slo)
        _replace(run / REQUESTS_FILE, lambda p: pq.write_table(table, p))
    text = json.dumps(summary, indent=2, sort_keys=False, allow_nan=False) + "\n"
    _replace(run / SUMMARY_FILE, lambda p: p.write_text(text, encoding="utf-8"))
    return run


def read_run(run_dir: str | Path) -> tuple[pa.Table | None, dict]:
    """(requests table or None when the run has no per-request data, summary); ``ConfigError`` on a bad run dir."""
    run = Path(run_dir)
    path = run / SUMMARY_FILE
    if not path.is_file():
        raise ConfigError(str(run), SUMMARY_FILE, "not found; is this a goodput loadtest run directory?")
    summary = load_json(path)
    if not isinstance(summary, dict) or summary.get("schema") != SCHEMA:
        found = summary.get("schema") if isinstance(summary, dict) else type(summary).__name__
        raise ConfigError(str(path), "schema", f"expected {SCHEMA!r}, found {found!r}")
    if not isinstance(summary.get("steps"), list):
        raise ConfigError(str(path), "steps", "expected a list of steps")
    req = run / REQUESTS_FILE
    if not req.is_file():
        return None, summary
    try:
        table = pq.read_table(req)
    except (pa.ArrowInvalid, OSError) as e:
        raise ConfigError(str(req), "parquet", f"does not read: {e}") from None
    missing = [n for n in _RECORD_FIELDS if n not in table.column_names]
    if missing:
        raise ConfigError(str(req), "columns", f"missing {', '.join(missing)}")
    return table, summary
