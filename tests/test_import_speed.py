"""`import armillary` and the CLI load no compiler or plotting library: they load on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

HEAVY = ("numba", "llvmlite", "plotly", "matplotlib", "networkx", "scipy")


@pytest.mark.parametrize("module", ["armillary", "armillary.cli"])
def test_import_loads_no_heavy_library(module: str) -> None:
    code = f"import sys, {module}; print(' '.join(sorted({{m.split('.')[0] for m in sys.modules}})))"
    loaded = set(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                                text=True).stdout.split())
    assert not loaded & set(HEAVY), f"import {module} loads {sorted(loaded & set(HEAVY))}"


def test_the_calls_keep_their_names_when_their_packages_load_later() -> None:
    """The estimators, searches and simulators load on first use; loading them (or a result type, which
    imports its package) leaves armillary.estimate / search / simulate the calls, not the packages."""
    code = ("import armillary, inspect; armillary.StepEstimate; armillary.SearchResult; armillary.ServingResult; "
            "import armillary.estimate.training, armillary.search.sweep, armillary.simulate.run; "
            "from armillary import *; "
            "print(all(inspect.isfunction(f) for f in (armillary.estimate, armillary.search, armillary.simulate)))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["True"]
