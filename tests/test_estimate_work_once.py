"""Work the estimator takes once (issue 47): the TP collectives of a micro-batch for every layer kind, the shape
rules for a search block's mask and its estimate. Counted, so that a change that takes them twice fails."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from armillary.api import estimate
from armillary.comm import collectives
from armillary.estimate import feasibility, layer_comm
from armillary.search import run as search_run
from armillary.search.run import Objective, Problem
from armillary.search.space import StrategySpace, resolve_axes
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.specs.run import load_run

EXAMPLES = Path(__file__).parent.parent / "examples"


def test_an_moe_model_prices_its_tp_collectives_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """Mixtral (TP 2 with sequence parallelism, expert TP 1): one all-gather, one reduce-scatter of the TP
    message and one all-reduce for the ends, although the dense and the MoE layer kinds both use them."""
    calls: Counter[str] = Counter()
    for name in ("all_gather", "reduce_scatter", "all_reduce"):
        original = getattr(collectives, name)

        def counted(*args: Any, _name: str = name, _f: Any = original, **kwargs: Any) -> Any:
            calls[_name] += 1
            return _f(*args, **kwargs)
        monkeypatch.setattr(layer_comm, name, counted)
    model, system, strategy, workload = load_run(EXAMPLES / "mixtral-8x7b-h100.yaml")
    # a system object of its own: the estimator keeps a layer's cost per system object and inputs
    # (estimate/training_layers.py `MODEL_PARTS`), so an earlier estimate of the same run would price nothing here
    result = estimate(model, system.model_copy(), strategy, workload)
    assert result.moe_layer is not None and result.moe_layer.tp_forward_s > 0
    assert calls == Counter(all_gather=1, reduce_scatter=1, all_reduce=1)


def test_a_search_block_takes_the_shape_rules_once(monkeypatch: pytest.MonkeyPatch) -> None:
    m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    base, space = load_strategy({"attention": "flash"}), StrategySpace()
    axes = resolve_axes(space, m, system.devices, system.devices_per_node, base, system.device.hbm.capacity,
                        False, workload)
    problem = Problem(m, system, base, workload, space, axes, Objective.TIME, 10)
    taken = [0]
    original = feasibility.training_checks

    def counted(*args: Any) -> Any:
        taken[0] += 1
        return original(*args)
    monkeypatch.setattr(feasibility, "training_checks", counted)
    monkeypatch.setattr(search_run, "training_checks", counted, raising=False)  # wherever the search takes it
    found = problem.evaluate(0, axes.size)
    assert found.feasible > 0
    assert taken[0] == 1
