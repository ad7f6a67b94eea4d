"""Each package's public surface is explicit: __all__ is sorted and names exactly what the package exports, and
importing a package loads none of it until a name is used."""

import importlib
import json
import subprocess
import sys

import pytest

from tests.conftest import REPO

# every package of the one import package, found, not listed: a new part is held to the same rule
PACKAGES = sorted(".".join(p.parent.relative_to(REPO).parts) for p in (REPO / "goodput").rglob("__init__.py"))


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_sorted_and_complete(package):
    mod = importlib.import_module(package)
    names = mod.__all__
    assert names == sorted(names)
    assert all(hasattr(mod, n) for n in names)
    assert set(names) <= set(dir(mod))
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", "").startswith(package)}
    assert public <= set(names) | {n for n in public if importlib.util.find_spec(f"{package}.{n}")}
    with pytest.raises(AttributeError, match="no attribute 'not_exported'"):
        mod.not_exported  # noqa: B018


# In a fresh interpreter: what `import PACKAGE` loads, then each export after its own submodule was imported first
# (the import system binds `goodput.analyzer.decompose` the module to the attribute the function `decompose` owns).
PROBE = """
import importlib, json, sys
pkg = importlib.import_module(sys.argv[1])
loaded = sorted(m for m in sys.modules if m.split(".")[0] in ("pandas", "duckdb", "pyarrow", "numpy", "httpx")
                or (m.startswith(sys.argv[1] + ".") and m != sys.argv[1] + ".compiled"))
for name in pkg.__all__:
    if importlib.util.find_spec(f"{sys.argv[1]}.{name}"):
        importlib.import_module(f"{sys.argv[1]}.{name}")
exports = {}
for name in pkg.__all__:
    value = getattr(pkg, name)
    exports[name] = type(value).__name__
star = {}
exec(f"from {sys.argv[1]} import *", star)
print(json.dumps({"loaded": loaded, "exports": exports, "star": sorted(k for k in star if k != "__builtins__")}))
"""


@pytest.mark.parametrize("package", ["goodput.simulator", "goodput.exporters", "goodput.analyzer", "goodput.loadtest",
                                     "goodput.console"])
def test_importing_a_package_loads_nothing_and_exports_stay_exports(package):
    proc = subprocess.run([sys.executable, "-c", PROBE, package], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    got = json.loads(proc.stdout)
    assert got["loaded"] == [], f"`import {package}` loaded {got['loaded']}"
    assert "module" not in got["exports"].values(), got["exports"]
    assert got["star"] == importlib.import_module(package).__all__
