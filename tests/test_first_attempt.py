"""A first attempt that does not fit says why and what would (issue 45): Llama 3.1 70B on 512 H100 at tp 8,
pp 4 under the defaults needs 176 GiB of 80; the message names the largest memory categories and the first
of the usual changes under which the same estimator finds it fits. The calls, the command line and a search
start from the same defaults (`armillary.defaults.STRATEGY`)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from typer.testing import CliRunner

import armillary
from armillary import defaults
from armillary.cli import app

RUN = {"model": "llama3.1-70b", "system": "dgx-h100", "gpus": 512, "strategy": {"tp": 8, "pp": 4},
       "workload": {"seq_len": 8192, "global_batch": 128}}


def _estimate(strategy: dict[str, object], gpus: int = 512) -> armillary.StepEstimate:
    result = armillary.run_estimate(RUN["model"], RUN["system"], strategy, RUN["workload"], gpus=gpus)
    assert isinstance(result, armillary.StepEstimate)
    return result


def test_out_of_memory_names_the_largest_categories_and_a_change_that_fits() -> None:
    est = _estimate({"tp": 8, "pp": 4})
    assert not est.feasible
    assert "HBM: 176.3 GiB needed of 80.0 GiB" in est.infeasible_reasons
    reasons = "; ".join(est.advice)
    largest = re.search(r"largest per device: (\w[\w ]*) ([\d.]+) GiB", reasons)
    assert largest is not None and largest.group(1) == "activations"  # standard attention keeps s x s scores
    assert float(largest.group(2)) == round(float(est.memory_hbm.activations) / 2**30, 1)
    fits = re.search(r"fits with ([^:]+):", reasons)
    assert fits is not None and fits.group(1) == "attention=flash, sequence_parallel=True"
    changed = {k: (v == "True" if v in ("True", "False") else v) for k, v in
               (item.split("=") for item in fits.group(1).split(", "))}
    fixed = _estimate({"tp": 8, "pp": 4, **changed})  # the advice, taken, fits
    assert fixed.feasible and f"{float(fixed.memory_hbm.total) / 2**30:.1f} GiB of 80.0 GiB" in reasons
    assert not fixed.advice and "advice=fits with attention=flash" in repr(est)


def test_flash_alone_is_not_enough_and_each_rung_is_tried_on_top_of_the_last() -> None:
    assert not _estimate({"tp": 8, "pp": 4, "attention": "flash"}).feasible
    reasons = "; ".join(_estimate({"tp": 8, "pp": 4, "attention": "flash"}).advice)
    assert "fits with sequence_parallel=True:" in reasons  # flash is already there: not advised again


def test_nothing_fits_says_run_search() -> None:
    reasons = "; ".join(armillary.run_estimate("llama3.1-405b", "dgx-h100", {"tp": 1}, RUN["workload"],
                                               gpus=8).advice)
    assert "run `armillary search`" in reasons and "largest per device: optimizer states" in reasons


def test_the_command_line_prints_the_advice(tmp_path: Path) -> None:
    run = tmp_path / "first.yaml"
    run.write_text(yaml.safe_dump(RUN))
    out = CliRunner().invoke(app, ["estimate", str(run)])
    assert out.exit_code == 1
    assert "largest per device: activations" in out.output
    assert "--set strategy.attention=flash --set strategy.sequence_parallel=true" in out.output
    taken = CliRunner().invoke(app, ["estimate", str(run), "--set", "strategy.attention=flash", "--set",
                                     "strategy.sequence_parallel=true", "--json"])
    assert taken.exit_code == 0, taken.output


def test_calls_command_line_and_search_share_one_default_strategy() -> None:
    assert armillary.load_strategy(defaults.STRATEGY) == armillary.Strategy()
    assert defaults.SEARCH_BASE_STRATEGY is defaults.STRATEGY
    space = {"tp": [2], "pp": [1], "micro_batch": [1], "zero": [1], "recompute": ["none"]}
    w = {"seq_len": 2048, "global_batch": 16}
    found = armillary.run_search("llama3-8b", "dgx-h100", None, w, space=space, gpus=8, top=1)
    stated = armillary.run_search("llama3-8b", "dgx-h100", defaults.STRATEGY, w, space=space, gpus=8, top=1)
    assert found.top[0].strategy == stated.top[0].strategy
    best = found.top[0].strategy  # the space varies attention (flash) over the shared base
    assert best.attention.value.startswith("flash")
    assert float(_estimate_of(best).step_time_s) == found.top[0].step_time_s


def _estimate_of(strategy: armillary.Strategy) -> armillary.StepEstimate:
    result = armillary.run_estimate("llama3-8b", "dgx-h100", strategy, {"seq_len": 2048, "global_batch": 16},
                                    gpus=8)
    assert isinstance(result, armillary.StepEstimate)
    return result
