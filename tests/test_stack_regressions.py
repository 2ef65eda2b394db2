"""Rows whose stack's own tracker calls the published run a regression: carried with the tracker's words, set
aside only in the second figure of the accuracy tables, never fitted."""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import pytest

from armillary.errors import SpecError
from armillary.validation.regressions import (
    COLUMNS,
    acknowledged_regressions,
    caveat_of,
    read_entries,
    shipped_entries,
)
from armillary.validation.run import DEFAULT_CSV, read_rows, run_row, write_csv

ROOT = Path(__file__).resolve().parent.parent
MEASURED = {r["id"]: r for r in read_rows(DEFAULT_CSV)}


def _tool():
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import accuracy_tables
    finally:
        sys.path.remove(str(ROOT / "tools"))
    return accuracy_tables


def test_the_acknowledged_regressions_are_the_rows_the_trackers_name():
    """Megatron-Bridge #1998 names Qwen3 30B on B200 and H100 in 25.11; #1760 the Qwen3 235B B200 recipe of
    25.11. Nothing else in the shared rows is called a regression by its maintainers."""
    assert acknowledged_regressions() == {"TR-MBRIDGE-25.11-B200-21", "TR-MBRIDGE-25.11-H100-27",
                                          "TR-MBRIDGE-25.11-B200-22"}
    for row_id in acknowledged_regressions():
        row = MEASURED[row_id]
        assert "25.11" in row["framework"] and row["model"].startswith("Qwen3")


def test_every_entry_names_a_shipped_row_and_a_tracker():
    entries = [e for es in shipped_entries().values() for e in es]
    assert entries and all(e.id in MEASURED for e in entries), [e.id for e in entries if e.id not in MEASURED]
    assert all(e.tracker.startswith("https://github.com/NVIDIA-NeMo/Megatron-Bridge/") for e in entries)
    # the two GB200 / GB300 Llama 3 70B rows were checked: only GB200-10 has a tracker entry, and it is a note
    assert [e.kind for e in shipped_entries()["TR-MBRIDGE-25.11-GB200-10"]] == ["note"]
    assert "TR-MBRIDGE-25.11-GB300-02" not in shipped_entries()


def _step_seconds(row: dict[str, str], gbs: int | None = None) -> float:
    """Step time from a row's tokens/s/GPU: global batch x sequence / (tokens/s/GPU x GPUs)."""
    assert row["metric"] == "tokens/s/GPU"
    return (gbs or int(row["gbs"])) * int(row["seq"]) / (float(row["value"]) * int(row["n_gpus"]))


def test_the_trackers_figures_are_the_rows_runs():
    """What ties each entry to its row, from the published numbers: #1760's 25.11 MXFP8 step of 20.1 s is
    B200-22's 3,269 tokens/s/GPU on 64 GPUs at GBS 1,024 and 4,096 tokens; #1976's 3.8 s/it at the recipe's
    GBS 128 is GB200-10's 4,312 tokens/s/GPU (the table's GBS 256 would be 7.6 s); #1869's '557 TFLOPs' is
    B200-19's model TFLOP/s."""
    assert _step_seconds(MEASURED["TR-MBRIDGE-25.11-B200-22"]) == pytest.approx(20.1, abs=0.06)
    assert _step_seconds(MEASURED["TR-MBRIDGE-25.11-GB200-10"], gbs=128) == pytest.approx(3.8, abs=0.01)
    assert _step_seconds(MEASURED["TR-MBRIDGE-25.11-GB200-10"]) == pytest.approx(7.6, abs=0.01)
    assert "model TFLOP/s/GPU 557" in MEASURED["TR-MBRIDGE-25.11-B200-19"]["other_reported"]
    assert "557" in shipped_entries()["TR-MBRIDGE-25.11-B200-19"][0].words


def _write(path: Path, rows: list[dict[str, str]]) -> Path:
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.DictWriter(f, fieldnames=list(COLUMNS))
        w.writeheader()
        w.writerows(rows)
    return path


GOOD = {"id": "TR-X-1", "kind": "note", "tracker": "https://github.com/o/r/issues/1", "words": "w",
        "diagnosis": "none stated", "status": "open"}


@pytest.mark.parametrize(("field", "value", "says"), [
    ("kind", "regression", "kind: expected one of acknowledged_regression, note"),
    ("tracker", "see the forum", "tracker: expected a GitHub issue or pull request URL"),
    ("tracker", "https://github.com/o/r", "tracker: expected a GitHub issue or pull request URL"),
    ("words", "", "words: empty"),
    ("diagnosis", " ", "diagnosis: empty"),
])
def test_a_bad_entry_names_its_field(tmp_path, field, value, says):
    path = _write(tmp_path / "t.csv", [{**GOOD, field: value}])
    with pytest.raises(SpecError, match=f"line 2: {says}"):
        read_entries(path)


def test_a_file_without_a_column_or_with_a_repeated_entry_is_refused(tmp_path):
    path = tmp_path / "t.csv"
    path.write_text("id,kind,tracker,words\nTR-X-1,note,https://github.com/o/r/pull/2,w\n")
    with pytest.raises(SpecError, match="columns diagnosis, status missing"):
        read_entries(path)
    with pytest.raises(SpecError, match="TR-X-1 is listed twice"):
        read_entries(_write(tmp_path / "u.csv", [GOOD, GOOD]))
    with pytest.raises(SpecError, match="no such file"):
        read_entries(tmp_path / "absent.csv")
    assert read_entries(_write(tmp_path / "v.csv", [GOOD]))[0].sets_aside is False


def test_the_harness_carries_the_trackers_words_and_changes_no_prediction(tmp_path):
    """The caveat is text beside the result: the row runs as before, and the CSV gets a `caveat` column."""
    result = run_row(MEASURED["TR-MBRIDGE-25.11-B200-22"])
    assert result.caveat is not None and result.caveat.startswith("acknowledged stack regression (")
    assert "pull/1760" in result.caveat and "CPU overhead" in result.caveat
    assert result.error is not None and result.predicted is not None
    plain = run_row(MEASURED["TR-MBRIDGE-25.11-B200-17"])
    assert plain.caveat is None and caveat_of("TR-MBRIDGE-25.11-B200-17") is None
    assert caveat_of("TR-MBRIDGE-25.11-GB200-10").startswith("tracker note (")
    write_csv([result, plain], tmp_path / "v.csv")
    with (tmp_path / "v.csv").open(newline="") as f:
        written = list(csv.DictReader(f))
    assert written[0]["caveat"] == result.caveat and written[1]["caveat"] == ""


def test_the_accuracy_tables_give_both_figures(tmp_path):
    """By hand: group TR-A has |errors| 0.1, 0.3 (set aside) and 0.5: 30.0% over all rows, 30.0% without
    (0.1, 0.5); the domain adds TR-B's 0.2: 27.5% and 26.7%. A group without such rows is not listed."""
    tool = _tool()
    results = tmp_path / "validate.csv"
    results.write_text("id,group,metric,measured,predicted,error,assumptions,skipped,feasible\n"
                       "TR-A-1,TR-A,step,1,1.1,0.1,,,True\nTR-A-2,TR-A,step,1,1.3,0.3,,,True\n"
                       "TR-A-3,TR-A,step,1,0.5,-0.5,,,True\nTR-B-1,TR-B,step,1,1.2,0.2,,,True\n"
                       "TR-B-2,TR-B,step,1,,,,no tp,True\n")
    lines = tool.regressions_table(tool.read_rows(results), frozenset({"TR-A-2"})).splitlines()
    assert lines[:2] == tool.REGRESSIONS_HEADER.splitlines()
    assert lines[2] == "| TR-A | 3 / 3 | 30.0% | 1 | 2 / 2 | 30.0% | 30.0% | 50.0% |"
    assert lines[3] == "| **all training** (2 groups) | 4 / 5 | 27.5% | 1 | 3 / 4 | 26.7% | 20.0% | 50.0% |"
    assert len(lines) == 4
    assert tool.read_results(results)["training"]["TR-A"] == pytest.approx([0.1, 0.3, 0.5])
