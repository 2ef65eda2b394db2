"""Every command in the documentation (docs/*.md) is run by a test, or checked against the CLI where it is a
template, or listed below with the reason it is not run here; the Python examples run; the site builds with
warnings as errors (where mkdocs is installed: `pip install -e '.[docs]'`)."""

from __future__ import annotations

import importlib.util
import re
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from armillary.cli import app

ROOT = Path(__file__).parent.parent
DOCS = sorted((ROOT / "docs").glob("*.md"))

# commands that are not run here, each with the reason; a template's options are still checked against the CLI
NOT_RUN = {
    "pip install": "installs packages: CI runs the quick start in a fresh virtual environment (.ci/run)",
    "armillary validate": "runs every measured row (one to two minutes): tests/test_validation*.py run the harness",
    "armillary calibrate-compute": "times kernels with torch for minutes: tests/test_compute_calibration.py",
    "armillary commbench": "needs torch.distributed: tests/test_commbench.py runs it where torch is installed",
    "armillary --install-completion": "edits the user's shell start-up files",
    "python benchmarks/": "benchmarks take minutes on a loaded machine; tests/test_*.py hold their targets",
}
# placeholders of a template (not a runnable command): its subcommand and options are checked instead
TRAINING_RUN, SERVING_RUN = "examples/llama3-70b-h100.yaml", "examples/llama2-70b-serving-h100.yaml"
TEMPLATE = re.compile(r"\[|\||\bRUN\.yaml|\bCSV\b|\bDIR\b|MY-SYSTEM|nccl-tests\.log|\bOUT\.")


def commands(text: str) -> list[str]:
    """The command lines of a markdown text's bash blocks: continuations joined, comments dropped."""
    out = []
    for block in re.findall(r"```(?:bash|sh)\n(.*?)```", text, flags=re.S):
        block = re.sub(r"\\\n\s*", " ", block)
        # a line that starts with spaces and a bracket continues the command above (a wrapped template)
        block = re.sub(r"\n\s+(?=\[)", " ", block)
        for line in block.splitlines():
            line = re.sub(r"\s+#.*$", "", line).strip()
            if line and not line.startswith("#"):
                out.append(line)
    return out


def python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def not_run_reason(line: str) -> str | None:
    return next((why for prefix, why in NOT_RUN.items() if line.startswith(prefix)), None)


def _command_for(words: list[str]) -> tuple[typer.core.TyperCommand | typer.core.TyperGroup, list[str]]:
    """The click command a command line names (groups resolved) and the words after it."""
    command = typer.main.get_command(app)
    rest = words
    while isinstance(getattr(command, "commands", None), dict) and rest and not rest[0].startswith("-"):
        sub = command.commands.get(rest[0])  # a group's subcommands (typer may vendor its own click)
        if sub is None:
            break
        command, rest = sub, rest[1:]
    return command, rest


def check_template(line: str) -> None:
    """A template's subcommand exists and takes every option it names."""
    words = line.replace("[", " ").replace("]", " ").replace("|", " ").split()
    assert words[0] == "armillary", line
    command, rest = _command_for(words[1:])
    if not command.name or not rest:  # top-level options (--version, --install-completion)
        return
    options = {o for p in command.params for o in (*p.opts, *p.secondary_opts)}
    named = {w.split("=")[0] for w in rest if re.fullmatch(r"--?[a-z][a-z0-9-]*(=.*)?", w)}
    assert named <= options, f"{line}: {sorted(named - options)} not options of `armillary {command.name}`"


def run_cli(line: str, where: Path) -> str:
    """Run one concrete `armillary ...` line in `where` (examples/ linked there); its output."""
    (where / "examples").exists() or (where / "examples").symlink_to(ROOT / "examples")
    words = shlex.split(line)
    assert words[0] == "armillary", line
    start = time.perf_counter()
    out = CliRunner().invoke(app, words[1:], catch_exceptions=False, env={"COLUMNS": "120"})
    assert out.exit_code == 0, f"{line}\n{out.output}"
    assert time.perf_counter() - start < 60, f"{line}: too slow for a documentation test"
    return out.output


def _doc_lines() -> list[tuple[str, str]]:
    return [(p.name, line) for p in DOCS for line in commands(p.read_text())]


DOC_LINES = _doc_lines()


def test_the_docs_have_commands():
    assert len(DOC_LINES) > 40


@pytest.mark.parametrize(("page", "line"), DOC_LINES, ids=[f"{p}:{i}" for i, (p, _) in enumerate(DOC_LINES)])
def test_every_docs_command_runs_or_is_checked(page, line, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    if not_run_reason(line):
        if line.startswith("armillary"):
            check_template(line)
        elif line.startswith("python "):
            assert (ROOT / line.split()[1]).is_file(), line
        return
    assert line.startswith("armillary "), f"{page}: {line!r}: not a command this test knows how to run"
    if TEMPLATE.search(line):
        check_template(line)
        required = re.sub(r"\s*\[[^\[\]]*\]", "", line)  # without its optional parts it may run as it stands
        # RUN.yaml stands for a run file: a shipped example of the kind the command takes
        example = SERVING_RUN if line.startswith("armillary serve ") else TRAINING_RUN
        required = required.replace("RUN.yaml", example)
        required = re.sub(r"(\S+?)(\|\S+)+", r"\1", required)  # a choice (a|b|c): its first
        if not TEMPLATE.search(required):
            run_cli(required, tmp_path)
    else:
        run_cli(line, tmp_path)


def test_a_template_with_an_option_the_cli_lacks_fails():
    check_template("armillary estimate RUN.yaml [--json] [--emit megatron]")
    check_template("armillary presets show h100-sxm [--kind devices]")
    for wrong in ("armillary estimate RUN.yaml [--no-such-option]", "armillary presets show h100-sxm --nope"):
        with pytest.raises(AssertionError, match="not options of"):
            check_template(wrong)


PY_BLOCKS = [(p.name, b) for p in DOCS for b in python_blocks(p.read_text())]


@pytest.mark.parametrize(("page", "block"), PY_BLOCKS, ids=[f"{p}:{i}" for i, (p, _) in enumerate(PY_BLOCKS)])
def test_every_docs_python_example_runs(page, block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block, page, "exec"), {})  # our own docs


def test_the_accuracy_tables_tool_renders_a_small_result(tmp_path):
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import accuracy_tables as tool
    finally:
        sys.path.remove(str(ROOT / "tools"))
    results = tmp_path / "validate.csv"
    results.write_text("id,group,metric,measured,predicted,error,assumptions,skipped,feasible\n"
                       "TR-A-1,TR-A,step,1,1.1,0.1,,,True\nTR-A-2,TR-A,step,1,0.7,-0.3,,,True\n"
                       "TR-B-1,TR-B,step,1,,,,no tp,True\nCO-X-1,CO-X,busbw,1,1.02,0.02,,,True\n"
                       "MEM-Y-1,MEM-Y,peak memory,1,1.1,0.1,,,True\n")
    found = tool.read_results(results)
    assert set(found["training"]) == {"TR-A", "TR-B"} and set(found["collectives"]) == {"CO-X"}
    assert set(found["memory"]) == {"MEM-Y"} and not found["inference"]  # memory rows are not inference
    table = tool.table(found["training"], largest=1).splitlines()
    assert table[:2] == tool.HEADER.splitlines()
    assert table[2] == "| TR-A | 2 / 2 | 20.0% | 20.0% | 30.0% |"
    assert table[3] == "| other sources (1 group) | 0 / 1 | | | |"
    assert table[4] == "| **all** (2 groups) | 2 / 3 | 20.0% | 20.0% | 30.0% |"
    text = "a\n<!-- accuracy:training:start -->\nold\n<!-- accuracy:training:end -->\nb"
    assert tool.replace_between(text, "training", "new") == text.replace("old", "new")


def test_the_site_builds_with_warnings_as_errors(tmp_path):
    if importlib.util.find_spec("mkdocs") is None:  # this interpreter's, not another one's on the PATH
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'); .ci/run builds the site after the tests")
    out = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (tmp_path / "site" / "index.html").is_file()
