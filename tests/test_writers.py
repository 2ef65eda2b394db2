"""Every writer of the command line, pointed at a folder, /dev/full and a read-only place, refuses before
the work starts with an error naming the file; a save that fails at the last step (a full disk when the
finished file is moved into place) leaves no file, not even a temporary one, and the run's result has
been printed before it. Not here: commbench --out / --tune and calibrate-compute --out / --compare, which
measure with torch (they write through the same `armillary.writing.replaced`)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from armillary.cli import app

ROOT = Path(__file__).parent.parent
EXAMPLE = str(ROOT / "examples" / "llama3-70b-h100.yaml")
SERVING = str(ROOT / "examples" / "llama2-70b-serving-h100.yaml")
MEASUREMENTS = ROOT / "src" / "armillary" / "validation" / "data" / "measurements.csv"
SEARCH = ["search", "--model", "llama2-7b", "--system", "dgx-a100", "--gpus", "8", "--global-batch", "16", "--json"]
# (command with {out} for the target, file name, what the printed result holds; None: the file is the result)
WRITERS = {
    "comm-profile --plot": (["comm-profile", EXAMPLE, "--json", "--plot", "{out}"], "hist.png", '"operation"'),
    "compare --plot": (["compare", EXAMPLE, "--variant", "strategy.tp=4", "--json", "--plot", "{out}"], "bars.png",
                       '"runs"'),
    "sweep --plot": (["sweep", EXAMPLE, "--vary", "gpus=256..512", "--json", "--plot", "{out}"], "sweep.png",
                     '"gpus"'),
    "collective --plot": (["collective", "--system", "dgx-h100", "--gpus", "16", "--sizes", "1K:1M", "--json",
                           "--plot", "{out}"], "busbw.png", '"busbw'),
    "search --save csv": ([*SEARCH, "--save", "{out}"], "top.csv", '"top"'),
    "search --save json": ([*SEARCH, "--save", "{out}"], "top.json", '"top"'),
    "search --save parquet": ([*SEARCH, "--save", "{out}"], "top.parquet", '"top"'),
    "search --emit": ([*SEARCH, "--emit", "{out}"], "best.yaml", '"top"'),
    "search --resume": ([*SEARCH, "--resume", "{out}"], "search.ckpt", None),  # written first, before the work
    "serve --save": (["serve", SERVING, "--rate", "1", "--duration", "5", "--json", "--save", "{out}"],
                     "requests.csv", '"ttft_s"'),
    "serve --plot": (["serve", SERVING, "--rate", "1", "--duration", "5", "--json", "--plot", "{out}"],
                     "cdf.png", '"ttft_s"'),
    "simulate --trace json": (["simulate", EXAMPLE, "--json", "--trace", "{out}"], "trace.json", '"step_time_s"'),
    "simulate --trace pftrace": (["simulate", EXAMPLE, "--json", "--trace", "{out}"], "trace.pftrace",
                                 '"step_time_s"'),
    "simulate --chakra": (["simulate", EXAMPLE, "--json", "--chakra", "{out}"], "et", '"step_time_s"'),
    "validate --csv": (["validate", "{rows}", "--json", "--csv", "{out}"], "rows.csv", '"predicted'),
    "validate --plot": (["validate", "{rows}", "--json", "--plot", "{out}"], "rows.png", '"predicted'),
    "report -o": (["report", EXAMPLE, "-o", "{out}"], "report.html", None),
    "calibrate-network --out": (["calibrate-network", "{log}", "--system", "dgx-a100", "--gpus", "8", "--out",
                                 "{out}"], "fitted.yaml", None),
    "synthesize --xml": (["synthesize", "--topology", "ring:4", "--json", "--xml", "{out}"], "ring.xml", '"op"'),
    "synthesize --chakra": (["synthesize", "--topology", "ring:4", "--json", "--chakra", "{out}"], "et", '"op"'),
    "network-optimize --plot": (["network-optimize", EXAMPLE, "--total", "325GB/s", "--json", "--plot", "{out}"],
                                "front.png", '"'),
}


def invoke(writer: str, target: Path, inputs: Path):
    from test_comm_calibration import nccl_tests_log

    from armillary.specs.communication import Collective
    from armillary.specs.loading import load_system

    rows, log = inputs / "two-rows.csv", inputs / "ar.log"
    rows.write_text("".join(MEASUREMENTS.read_text().splitlines(keepends=True)[:3]))
    log.write_text(nccl_tests_log(load_system("dgx-a100", 8), Collective.ALL_REDUCE, 8))
    args = [a.format(out=target, rows=rows, log=log) for a in WRITERS[writer][0]]
    return CliRunner().invoke(app, args)


@pytest.mark.parametrize("where", ["folder", "read-only", "dev-full"])
@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_writer_refuses_a_place_it_cannot_write_before_the_work(tmp_path, writer, where, monkeypatch):
    if where == "read-only" and os.geteuid() == 0:  # root writes into read-only folders: the check is told so
        real, locked = os.access, tmp_path / "out" / "locked"
        monkeypatch.setattr(os, "access", lambda path, mode, *args, **kw: (
            not (mode & os.W_OK and Path(path) == locked) and real(path, mode, *args, **kw)))
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    name = WRITERS[writer][1]
    if where == "folder":
        (out / name).mkdir()  # a folder where the file goes (for a folder writer: a file where it goes)
        if "." not in name:
            (out / name).rmdir()
            (out / name).write_text("")
    target = {"folder": out / name, "read-only": out / "locked" / name, "dev-full": Path("/dev/full")}[where]
    if where == "read-only":
        (out / "locked").mkdir()
        (out / "locked").chmod(0o500)
    try:
        result = invoke(writer, target, inputs)
    finally:
        if (out / "locked").exists():
            (out / "locked").chmod(0o700)
    assert result.exit_code == 2 and "cannot write" in result.output, result.output
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left == {"folder": [name], "read-only": ["locked"], "dev-full": []}[where], left


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_save_failing_at_the_end_leaves_nothing_and_the_result_printed(tmp_path, writer, monkeypatch):
    import armillary.writing

    def full_disk(*args: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(armillary.writing, "_move", full_disk)
    inputs, out = tmp_path / "inputs", tmp_path / "out"
    inputs.mkdir()
    out.mkdir()
    result = invoke(writer, out / WRITERS[writer][1], inputs)
    assert result.exit_code == 2 and "No space left" in result.output, result.output
    printed = WRITERS[writer][2]
    assert printed is None or printed in result.stdout, result.stdout[:500]
    left = sorted(str(p.relative_to(out)) for p in out.rglob("*"))
    assert left in ([], [WRITERS[writer][1]]) and not any(out.rglob("*.*")), left  # at most the empty folder
