"""The README's examples run as written: every command of its bash blocks (the quick start's installs are run
by CI itself, .ci/run), its Python example (feasible: an example that is out of memory teaches the wrong
thing), and its accuracy tables have the generated structure; every shipped example run file estimates
feasibly."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from test_docs import commands, not_run_reason, run_cli
from typer.testing import CliRunner

from armillary.cli import app

ROOT = Path(__file__).parent.parent
README = (ROOT / "README.md").read_text()
BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
QUICK_START = ("pip install . && armillary estimate examples/gpt3-175b-a100.yaml", "pip install -e '.[test]' && pytest")
LINES = commands(README)
DOMAINS = ("training", "inference", "serving", "collectives")


@pytest.mark.parametrize("block", BLOCKS[:1], ids=["python"])
def test_the_first_python_example_runs_and_is_feasible(block):
    names: dict[str, object] = {}
    exec(compile(block, "README.md", "exec"), names)  # our own README
    results = [v for v in names.values() if hasattr(v, "feasible") and hasattr(v, "infeasible_reasons")]
    assert results and all(bool(r.feasible) for r in results), [r.infeasible_reasons for r in results]


def test_the_quick_start_is_the_two_commands_ci_runs():
    assert LINES[:2] == list(QUICK_START)
    assert "pip install -e '.[test]' && pytest\n" in (ROOT / ".ci" / "run").read_text()


def test_the_quick_start_estimate_runs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    out = run_cli(QUICK_START[0].split(" && ")[1], tmp_path)
    assert "GPT-3 175B" in out and "step time" in out


@pytest.mark.parametrize("line", LINES[2:], ids=[f"{i}" for i in range(2, len(LINES))])
def test_every_readme_command_runs(line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert not not_run_reason(line), f"{line}: README commands all run here"
    run_cli(line, tmp_path)
    if "--trace " in line or " -o " in line:  # the file it names was written
        assert (tmp_path / line.split()[line.split().index("--trace" if "--trace " in line else "-o") + 1]).is_file()


RECIPES = re.findall(r"```bash\n([^\n]+)\n```\n\n```text\n(.*?)```", README, flags=re.S)


@pytest.mark.parametrize(("line", "shown"), RECIPES, ids=[f"{i}" for i in range(len(RECIPES))])
def test_the_output_a_recipe_shows_is_what_it_prints(line, shown, tmp_path, monkeypatch):
    """The rows a recipe shows are rows its command prints (their labels: the numbers move with the model)."""
    monkeypatch.chdir(tmp_path)
    printed = run_cli(line, tmp_path)
    labels = [re.split(r"[│┃]", row)[1].strip() for row in shown.splitlines() if row.startswith(("│", "┃"))]
    assert labels and all(label in printed for label in labels), [x for x in labels if x not in printed]


def test_the_readme_is_a_front_page():
    assert len(README.splitlines()) < 250


def test_the_readme_links_files_that_exist():
    links = [t for t in re.findall(r"\]\(([^)]+)\)", README) if not t.startswith("http")]
    assert links and all((ROOT / t).exists() for t in links), [t for t in links if not (ROOT / t).exists()]


@pytest.mark.parametrize("domain", DOMAINS)
@pytest.mark.parametrize("page", ["README.md", "docs/validation.md"])
def test_the_accuracy_tables_are_generated(page, domain):
    """Each domain's table is between its markers with the generator's header and a last row over the domain
    whose rows add up (regenerate: `python tools/accuracy_tables.py`, see its docstring)."""
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        from accuracy_tables import HEADER
    finally:
        sys.path.remove(str(ROOT / "tools"))
    text = (ROOT / page).read_text()
    found = re.search(f"<!-- accuracy:{domain}:start -->\n(.*?)\n<!-- accuracy:{domain}:end -->", text, re.S)
    assert found, f"{page}: no {domain} table"
    lines = found.group(1).splitlines()
    assert "\n".join(lines[:2]) == HEADER
    body, total = lines[2:-1], lines[-1]
    assert body and total.startswith("| **all** (")
    counts = [tuple(map(int, re.search(r"\| (\d+) / (\d+) \|", line).groups())) for line in (*body, total)]
    assert tuple(map(sum, zip(*counts[:-1], strict=True))) == counts[-1], (page, domain)
    assert counts[-1][0] > 0


@pytest.mark.parametrize("run_file", sorted((ROOT / "examples").glob("*.yaml")), ids=lambda p: p.name)
def test_every_example_run_file_is_feasible(run_file):
    out = CliRunner().invoke(app, ["estimate", str(run_file), "--json"])
    assert out.exit_code == 0, out.output
