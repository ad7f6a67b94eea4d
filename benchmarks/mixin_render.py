"""The monitoring mixin rendered as mixin users render it, under each jsonnet interpreter: time and peak memory.

``python -m benchmarks mixin_render [--json FILE] [--no-baseline]`` evaluates
``std.manifestYamlDoc((import 'mixin.libsonnet').prometheusRules)`` (kubernetes-mixin's way, ``jsonnet -S``) and the
same of ``prometheusAlerts``, each in its own process under ``/usr/bin/time -v``, with every interpreter found here:
go-jsonnet (the ``gojsonnet`` module, when importable), C++ jsonnet (the ``jsonnet`` module goodput depends on) and
the ``jsonnet`` command (Debian's C++ build) when on PATH.

Baseline, in the same run: the same mixin with each rule's ``expr`` stripped of its trailing newline, as
``goodput rules mixin-data`` wrote it before. C++ jsonnet's ``std.manifestYamlDoc`` is jsonnet code that quotes a
one-line string a character at a time (``std.escapeStringJson``), holding every intermediate value until the end,
and writes a string that ends in a newline as a YAML block, line by line: 160,000 characters of PromQL took 1–2
minutes and 8–10 GiB quoted, and seconds as blocks. docs/mixin.md reads these figures.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from benchmarks.report import emit

REPO = Path(__file__).resolve().parent.parent
MIXIN = REPO / "mixin"
FIELDS = ("prometheusRules", "prometheusAlerts")


def _interpreters() -> dict[str, list[str]]:
    """Name -> command that renders a jsonnet file (argument 1) with the mixin's directory (argument 2) on the path."""
    def module(name: str) -> list[str]:
        return [sys.executable, "-c", f"import sys, {name}; "
                f"sys.stdout.write({name}.evaluate_file(sys.argv[1], jpathdir=[sys.argv[2]]))"]
    out = {}
    if importlib.util.find_spec("_gojsonnet"):
        out["go-jsonnet (gojsonnet module)"] = module("_gojsonnet")
    out["C++ jsonnet (jsonnet module)"] = module("_jsonnet")
    if cmd := shutil.which("jsonnet"):
        version = subprocess.run([cmd, "--version"], capture_output=True, text=True).stdout.strip().split()[-1]
        out[f"C++ jsonnet {version} (jsonnet command)"] = ["sh", "-c", f'exec {cmd} -S -J "$2" "$1"', "jsonnet"]
    return out


def _measure(cmd: list[str], program: Path, mixin: Path) -> dict:
    """Wall and CPU seconds, peak RSS and output size of one render, in a process of its own."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd, str(program), str(mixin)], capture_output=True, text=True)
    if p.returncode != 0:
        raise SystemExit(f"mixin_render: {cmd[0]} failed: {p.stderr.strip().splitlines()[0]}")
    stat = dict(re.findall(r"^\s*(.+?): (.+)$", p.stderr, re.M))
    h, m, s = ([0.0] * 3 + [float(x) for x in stat["Elapsed (wall clock) time (h:mm:ss or m:ss)"].split(":")])[-3:]
    return {"wall_s": round(h * 3600 + m * 60 + s, 2),
            "cpu_s": round(float(stat["User time (seconds)"]) + float(stat["System time (seconds)"]), 2),
            "max_rss_mib": round(int(stat["Maximum resident set size (kbytes)"]) / 1024, 1),
            "output_chars": len(p.stdout)}


def _baseline(into: Path) -> Path:
    """A copy of the mixin whose rule exprs end without a newline, as before."""
    shutil.copytree(MIXIN, into)
    rules = json.loads((into / "generated" / "rules.json").read_text())
    for doc in rules.values():
        for group in doc["groups"]:
            for rule in group["rules"]:
                rule["expr"] = rule["expr"].rstrip("\n")
    (into / "generated" / "rules.json").write_text(json.dumps(rules, indent=1, sort_keys=True) + "\n")
    return into


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.mixin_render", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", type=Path, help="also write the figures to this file")
    parser.add_argument("--no-baseline", action="store_true",
                        help="skip the baseline (it takes minutes and GiBs under C++ jsonnet)")
    args = parser.parse_args(argv)
    figures: dict = {}
    with tempfile.TemporaryDirectory(prefix="mixin-render-") as tmp:
        programs = {}
        for field in FIELDS:
            programs[field] = Path(tmp) / f"{field}.jsonnet"
            programs[field].write_text(f"std.manifestYamlDoc((import 'mixin.libsonnet').{field})\n")
        mixins = {"after": MIXIN} if args.no_baseline else {"before": _baseline(Path(tmp) / "before"), "after": MIXIN}
        for name, cmd in _interpreters().items():
            for field, program in programs.items():
                for when, mixin in mixins.items():
                    figures.setdefault(name, {}).setdefault(field, {})[when] = _measure(cmd, program, mixin)
    return emit("mixin_render: std.manifestYamlDoc of the mixin's rules and alerts, per interpreter", figures,
                args.json)


if __name__ == "__main__":
    main()
