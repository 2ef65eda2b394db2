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
