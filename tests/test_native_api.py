"""The Python API as a notebook user meets it (issue 45): subpackages are modules, one argument order, a
DataFrame of every result with its inputs, docstrings on every call, a short help(armillary), short reprs
and HTML, and a one-liner for the largest rate under the SLOs."""

from __future__ import annotations

import inspect
import pydoc
import time

import pytest

import armillary
from armillary.report.frames import _table

TRAIN = {"seq_len": 2048, "global_batch": 32}
SERVE = {"kind": "inference", "input_len": 512, "output_len": 64,
         "serving": {"ttft_slo_s": 1.0, "tpot_slo_s": 0.05}}


def test_subpackages_are_modules_and_the_old_calls_still_run() -> None:
    import armillary.search.sweep

    assert inspect.ismodule(armillary.search) and inspect.isfunction(armillary.search.sweep.sweep)
    assert inspect.ismodule(armillary.estimate) and inspect.ismodule(armillary.simulate)
    new = armillary.run_estimate("llama3-8b", "dgx-h100", {"tp": 2}, TRAIN, gpus=8)
    old = armillary.estimate("llama3-8b", "dgx-h100", {"tp": 2}, TRAIN, gpus=8)
    assert float(new.step_time_s) == float(old.step_time_s)


def test_one_argument_order_model_system_strategy_workload() -> None:
    names = [list(inspect.signature(f).parameters)[:4] for f in (
        armillary.run_estimate, armillary.run_search, armillary.run_simulation, armillary.simulate_serving,
        armillary.max_rate, armillary.serve_benchmark, armillary.run_codesign)]
    assert all(n == ["model", "system", "strategy", "workload"] for n in names), names
    space = {"tp": [1, 2], "pp": [1], "micro_batch": [1], "zero": [0, 1]}
    new = armillary.run_search("llama3-8b", "dgx-h100", None, TRAIN, space=space, gpus=8, top=3)
    old = armillary.search("llama3-8b", "dgx-h100", TRAIN, None, space=space, gpus=8, top=3)  # the old order
    assert [c.strategy for c in new.top] == [c.strategy for c in old.top] and new.top
    with pytest.raises(armillary.SpecError, match="workload"):
        armillary.run_search("llama3-8b", "dgx-h100", gpus=8)


def test_every_call_has_a_docstring_and_help_is_a_page() -> None:
    for name in armillary.__all__:
        if name != "__version__":
            assert (inspect.getdoc(getattr(armillary, name)) or "").strip(), name
    text = pydoc.render_doc(armillary, renderer=pydoc.plaintext)
    assert len(text.splitlines()) < 250  # was 16,114 lines: every spec class's pydantic methods
    assert "run_estimate" in text and "to_frame" in text


def test_reprs_are_short_plain_numbers_with_html() -> None:
    est = armillary.run_estimate("llama3-8b", "dgx-h100", {"tp": 2}, TRAIN, gpus=8)
    text = repr(est)
    assert text.startswith("StepEstimate(step_time=") and "np." not in text and len(text) < 200
    assert f"mfu={float(est.mfu):.1%}" in text
    assert "<table" in est._repr_html_() and "step_time" in est._repr_html_()
    inf = armillary.run_estimate("llama2-70b", "dgx-h100", {"tp": 4}, {"kind": "inference", "batch": 8,
                                                                        "input_len": 512, "output_len": 64}, gpus=4)
    assert repr(inf).startswith("InferenceEstimate(batch=8, ttft=") and "np." not in repr(inf)


def test_frames_carry_the_inputs_and_take_comparisons() -> None:
    est = armillary.run_estimate("llama3-8b", "dgx-h100", {"tp": 2, "zero": 1}, TRAIN, gpus=8)
    row = _table(est)[0]
    assert (row["model"], row["devices"], row["strategy.tp"], row["strategy.zero"]) == ("Llama 3 8B", 8, 2, 1)
    assert row["workload.seq_len"] == 2048 and row["step_time_s"] == pytest.approx(float(est.step_time_s))
    compared = armillary.compare_variants("examples/llama3-70b-h100.yaml", ["strategy.tp=4"])
    rows = _table(compared)
    assert [r["name"] for r in rows] == list(compared.names) and len(rows) == 2
    assert rows[0]["summary.step_time"] != rows[1]["summary.step_time"]
    sizes = _table(armillary.collective("all_reduce", [2**20, 2**30], "dgx-h100"))
    assert [r["size_bytes"] for r in sizes] == [2**20, 2**30] and sizes[1]["time_s"] > sizes[0]["time_s"]
    with pytest.raises(TypeError, match="no table"):
        _table(3)


def test_to_frame_is_top_level() -> None:
    pd = pytest.importorskip("pandas")
    frame = armillary.to_frame(armillary.run_estimate("llama3-8b", "dgx-h100", {"tp": 2}, TRAIN, gpus=8))
    assert isinstance(frame, pd.DataFrame) and frame.loc[0, "strategy.tp"] == 2


def test_max_rate_is_one_call() -> None:
    started = time.perf_counter()
    found = armillary.max_rate("llama3-8b", "dgx-h100", {"tp": 1}, SERVE, duration_s=20, seeds=1, gpus=1)
    assert found.rate > 0 and found.result is not None and time.perf_counter() - started < 20
    assert repr(found).startswith("MaxRate(rate=") and "requests/s" in repr(found)
    assert found.result.config is not None and found.result.config.strategy.tp == 1
    rows = _table(found)
    assert len(rows) == len(found.tried) and any(r["meets"] for r in rows) and not all(r["meets"] for r in rows)


def test_a_sweep_shows_its_range() -> None:
    import numpy as np

    from armillary import display

    assert display.number(np.array([1.0, 2.5, np.inf])) == "1..2.5 (3 points)"
    assert display.number(61_870.3) == "61,870" and display.seconds(0.0123) == "12.3 ms"


def test_simulations_frame_against_the_estimate_with_their_inputs() -> None:
    sim = armillary.run_simulation("llama3-8b", "dgx-h100", {"tp": 2}, TRAIN, gpus=8)
    row = _table(sim)[0]
    assert row["step_time_s"] == sim.step_time_s and row["difference"] == pytest.approx(sim.difference)
    assert row["strategy.tp"] == 2 and row["model"] == "Llama 3 8B"
    assert sum(v for k, v in row.items() if k.startswith("critical_path.")) == pytest.approx(sim.step_time_s)


def test_codesign_in_the_one_order() -> None:
    systems = {"gpus": [8, 16], "prices": {"device": 1, "hbm_per_gib": 0}}
    space = {"tp": [2], "pp": [1], "micro_batch": [1], "zero": [1], "recompute": ["none"]}
    new = armillary.run_codesign("llama3-8b", "dgx-h100", None, TRAIN, systems, space)
    old = armillary.codesign("llama3-8b", "dgx-h100", TRAIN, systems, None, space)
    assert [p.best.step_time_s for p in new.points if p.best] == [p.best.step_time_s for p in old.points if p.best]
    rows = _table(new)
    assert len(rows) == 2 and {"system.gpus", "best.step_time_s", "pareto"} <= set(rows[0])


def test_comparisons_co_design_rows_and_sweeps_print_short_reprs():
    import numpy as np

    from armillary import api
    from armillary.comm.sweep import SweepRow
    from armillary.validation.run import RowResult

    found = api.search("llama3-70b", "dgx-h100", {"seq_len": 4096, "global_batch": 256}, gpus=256, top=3)
    simulated = api.simulate("llama3-8b", "dgx-h100", {"tp": 1, "zero": 1, "attention": "flash"},
                             {"seq_len": 4096, "global_batch": 64}, gpus=8)
    shown = [simulated, api.compare_variants("examples/llama3-70b-h100.yaml", ["system=dgx-b200"]), found, found.top[0],
             RowResult("X-1", "X", "tokens/s", 100.0, 110.0, 0.1, ("a",)),
             SweepRow(np.float64(2**20), np.float64(1e-4), 1e10, np.float64(2e10), "ring", ("ring/LL",))]
    for result in shown:
        text = repr(result)
        assert len(text) < 200 and "np.float64" not in text and text.startswith(type(result).__name__), text
        assert result._repr_html_().startswith("<table>")
