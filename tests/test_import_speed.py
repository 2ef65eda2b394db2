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


def test_the_subpackages_are_modules_that_still_run_their_old_calls() -> None:
    """armillary.estimate / search / simulate are the packages (armillary.search.sweep.sweep resolves), and
    calling them still runs the calls of those names, after any of their modules or result types loads."""
    code = ("import armillary, inspect; armillary.StepEstimate; armillary.SearchResult; armillary.ServingResult; "
            "import armillary.estimate.training, armillary.search.sweep, armillary.simulate.run; "
            "from armillary import *; "
            "print(all(inspect.ismodule(m) and callable(m) for m in (armillary.estimate, armillary.search, "
            "armillary.simulate)), inspect.isfunction(armillary.search.sweep.sweep), "
            "inspect.isfunction(armillary.run_estimate))")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.split() == ["True", "True", "True"]
