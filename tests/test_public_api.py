"""Each package's public surface is explicit: __all__ is sorted and names exactly what the package exports."""

import importlib

import pytest


@pytest.mark.parametrize("package", ["simulator", "exporters", "analyzer", "goodput"])
def test_all_is_sorted_and_complete(package):
    mod = importlib.import_module(package)
    names = mod.__all__
    assert names == sorted(names)
    assert all(hasattr(mod, n) for n in names)
    public = {n for n, v in vars(mod).items() if not n.startswith("_") and getattr(v, "__module__", "").startswith(package)}
    assert public <= set(names) | {n for n in public if importlib.util.find_spec(f"{package}.{n}")}
