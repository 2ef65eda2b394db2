"""The README's Python examples run as written and describe feasible runs (an example that is out of memory
teaches the wrong thing); every shipped example run file estimates feasibly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app

ROOT = Path(__file__).parent.parent
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), flags=re.S)


@pytest.mark.parametrize("block", BLOCKS[:1])
def test_the_first_python_example_runs_and_is_feasible(block):
    names: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), names)  # our own README
    results = [v for v in names.values() if hasattr(v, "feasible") and hasattr(v, "infeasible_reasons")]
    assert results and all(bool(r.feasible) for r in results), [r.infeasible_reasons for r in results]


@pytest.mark.parametrize("run_file", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_run_file_is_feasible(run_file):
    out = CliRunner().invoke(app, ["estimate", str(run_file), "--json"])
    assert out.exit_code == 0, out.output
