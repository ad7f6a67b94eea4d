"""Import other tools' load-test results into a goodput run directory, converted to goodput's definitions.

Read, each recognised by its shape (one module per tool): a GuideLLM JSON report, a vLLM ``bench serve
--save-result`` JSON, AIPerf's exports (per-request ``profile_export.jsonl``, aggregate ``profile_export_aiperf.json``
/ ``.csv``), inference-perf's report (its directory or any of its lifecycle files) and llm-d benchmark reports v0.2.
Where the file carries per-request data each request becomes a ``RequestRecord`` and the steps are summarized by
``stats.summarize`` exactly like a goodput run, so SLO goodput is computed for the ``--slo`` given here; without it
only the tool's own aggregates are carried over and the steps are left unjudged. ``docs/loadtest.md`` ("Importing
other tools' runs") lists each conversion.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from goodput.foundation.errors import ConfigError
from goodput.foundation.jsonfile import parse_json
from goodput.foundation.yamlfile import parse_yaml
from goodput.loadtest import llmd
from goodput.loadtest.imports import aiperf, common, guidellm, inference_perf, vllm
from goodput.loadtest.imports.common import MAX_IMPORT_BYTES, error_class
from goodput.loadtest.report import write_report
from goodput.loadtest.results import records_table, write_run
from goodput.loadtest.slo import Slo
from goodput.loadtest.stats import length_stats, verdict

__all__ = ["MAX_IMPORT_BYTES", "detect", "error_class", "import_run"]

_FORMATS = ("a GuideLLM JSON report, a vLLM bench serve --save-result JSON, an AIPerf profile export "
            "(profile_export.jsonl, profile_export_aiperf.json/.csv), an inference-perf report (its directory or a "
            "*_lifecycle_metrics.json) or an llm-d benchmark report v0.2")


def detect(data: object) -> str:
    """The tool that wrote the document, from its shape; ``""`` when it is none of them."""
    if isinstance(data, aiperf.AiperfCsv):
        return "aiperf"
    if not isinstance(data, dict):
        return inference_perf.detect(data)
    if isinstance(data.get("metadata"), dict) and "metrics" in data:
        return "aiperf"  # one line of profile_export.jsonl
    if isinstance(data.get("request_throughput"), dict):
        return "aiperf"  # profile_export_aiperf.json: every metric a {unit, avg, ...} block
    if isinstance(data.get("benchmarks"), list) and isinstance(data.get("metadata"), dict):
        return "guidellm"
    if "duration" in data and "completed" in data and "request_throughput" in data:
        return "vllm-bench"
    if llmd.is_report(data):
        return "llmd-v0.2"
    return inference_perf.detect(data)


def _parse(path: Path) -> Any:
    """The file's document: JSON, JSON lines (a list), YAML for an llm-d report, AIPerf's CSV sections. Its shape is
    the converters' to check (``detect`` tells the tool; ``import_run`` turns a wrong shape into one line)."""
    text = common.read_text(path)
    if text.startswith("Metric,"):
        return aiperf.parse_csv(text)
    if path.suffix in (".yaml", ".yml"):
        return parse_yaml(text, str(path))
    try:
        return parse_json(text, str(path), MAX_IMPORT_BYTES)
    except ConfigError as e:
        lines = [line for line in text.splitlines() if line.strip()]
        if len(lines) < 2 or not e.problem.startswith("not valid JSON"):
            raise
    out = []  # vLLM's --append-result and AIPerf's profile_export.jsonl: one JSON document per line
    for n, line in enumerate(lines, start=1):
        try:
            out.append(parse_json(line, str(path), MAX_IMPORT_BYTES))
        except ConfigError as e:
            raise ConfigError(str(path), f"line {n}", e.problem) from None
    return out


def _tool_of(data: object) -> str:
    if isinstance(data, list) and data and not isinstance(data, aiperf.AiperfCsv):
        tools = {detect(d) for d in data}
        if len(tools) == 1 and tools <= {"vllm-bench", "aiperf"}:
            return tools.pop()
    return detect(data)


def _convert(tool: str, data, p: Path, slo: Slo):
    if tool == "guidellm":
        return guidellm.import_guidellm(data, str(p), slo)
    if tool == "vllm-bench":
        return vllm.import_vllm(data if isinstance(data, list) else [data], str(p), slo)
    if tool == "aiperf" and not isinstance(data, aiperf.AiperfCsv) and (isinstance(data, list) or "metadata" in data):
        return aiperf.import_aiperf_records(data if isinstance(data, list) else [data], p, slo)
    if tool == "aiperf":
        return aiperf.import_aiperf_aggregate(data, p, slo), None
    if tool == "llmd-v0.2":
        return llmd.import_reports([(p, data)], slo), None
    return inference_perf.import_report(p, data, slo)


def _directory(p: Path, slo: Slo):
    """A tool's output directory: inference-perf's report directory, AIPerf's artifact directory, or llm-d reports."""
    if inference_perf.in_directory(p):
        return "inference-perf", *inference_perf.import_directory(p, slo)
    jsonl = p / "profile_export.jsonl"
    if jsonl.is_file():
        lines = _parse(jsonl)  # a file of one line parses as that line's document
        return "aiperf", *aiperf.import_aiperf_records(lines if isinstance(lines, list) else [lines], jsonl, slo)
    reports = [(f, _parse(f)) for f in sorted(p.iterdir()) if f.suffix in (".json", ".yaml", ".yml") and f.is_file()]
    reports = [(f, d) for f, d in reports if llmd.is_report(d)]
    if reports:
        return "llmd-v0.2", llmd.import_reports(reports, slo), None
    raise ConfigError(str(p), "directory", f"holds no result goodput reads; give {_FORMATS}")


def import_run(path: str | Path, out_dir: str | Path, slo: Slo) -> dict:
    """Convert ``path`` (another tool's result file, or its output directory) into ``out_dir``; returns the summary."""
    p = Path(path)
    tool = ""
    try:
        if p.is_dir():
            tool, summary, records = _directory(p, slo)
        else:
            data = _parse(p)
            tool = _tool_of(data)
            if not tool:
                raise ConfigError(str(p), "format", f"not {_FORMATS}")
            summary, records = _convert(tool, data, p, slo)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, ArithmeticError) as e:
        raise ConfigError(str(p), "content", f"not the {tool} structure expected: {type(e).__name__}: {e}") from None
    common.check_run(summary["steps"], records, str(p))
    summary["knee"] = verdict(summary["steps"])["knee"]
    # server | client where the file tells them apart; "tool" where it holds one count, as the tool recorded it
    summary["source"] = {"tool": tool, "file": p.name, "token_counts": "tool", **summary.get("source", {})}
    summary["valid"] = not summary["invalid_reasons"]
    if records:
        done = [r for r in records if not r.error]
        summary["comparability"]["input_tokens"] = length_stats([r.input_tokens for r in done])
        summary["comparability"]["output_tokens"] = length_stats([r.output_tokens for r in done])
    write_run(out_dir, records, summary)
    write_report(Path(out_dir), summary, records_table(records or [], slo))
    return summary
