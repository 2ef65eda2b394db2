"""Full recomputation of only the first N layers of each model chunk (Megatron --recompute-method block
--recompute-num-layers N): its time and memory lie between none and full in proportion to N / chunk layers,
the simulator takes the same schedule, and the validation harness recomputes no more layers than a row needs."""

import pytest
from hypothesis import given
from hypothesis import strategies as hs

import armillary
from armillary import Strategy, Training, estimate
from armillary.specs.loading import load_model, load_system

WORK = Training(seq_len=4096, global_batch=64)
BASE = {"tp": 8, "pp": 4, "attention": "flash", "sequence_parallel": True}  # llama3-70b: 80 layers, 20 a stage


def _run(recompute: str = "none", layers: int | None = None, **extra: object):
    st = Strategy.model_validate({**BASE, **extra, "recompute": recompute, "recompute_layers": layers})
    return estimate(load_model("llama3-70b"), load_system("dgx-h100", 64), st, WORK)


def test_time_and_memory_move_in_proportion_to_the_recomputed_layers():
    """By hand: N of a stage's 20 layers recomputed adds N/20 of full recomputation's time and FLOPs, keeps
    N/20 of the layers at their inputs only (checkpoints) and the other layers' activations whole, plus the
    one layer a backward rebuilds; all 20 is full recomputation."""
    none, full, five = _run(), _run("full"), _run("full", 5)
    share = 5 / 20
    for what in (lambda r: r.breakdown.recompute, lambda r: r.hardware_flop, lambda r: r.step_time_s):
        low, high = float(what(none)), float(what(full))
        assert float(what(five)) == pytest.approx(low + share * (high - low), rel=1e-9)
    hbm = {name: r.memory_hbm for name, r in (("none", none), ("full", full), ("five", five))}
    assert float(hbm["five"].checkpoints) == pytest.approx(share * float(hbm["full"].checkpoints), rel=1e-12)
    rebuilt = float(hbm["full"].activations)  # under full recomputation: the one layer being rebuilt
    assert float(hbm["five"].activations) == pytest.approx((1 - share) * float(hbm["none"].activations) + rebuilt,
                                                           rel=1e-12)
    assert float(_run("full", 20).step_time_s) == pytest.approx(float(full.step_time_s), rel=1e-12)
    assert float(_run("full", 40).memory_hbm.total) == pytest.approx(float(full.memory_hbm.total), rel=1e-12)


@given(hs.integers(1, 19))
def test_recomputing_one_more_layer_never_costs_memory_or_saves_time(n):
    fewer, more = _run("full", n), _run("full", n + 1)
    assert float(more.memory_hbm.total) <= float(fewer.memory_hbm.total)
    assert float(more.step_time_s) >= float(fewer.step_time_s)


def test_recompute_layers_apply_to_full_recomputation_only():
    with pytest.raises(ValueError, match="recompute_layers applies to recompute 'full' only"):
        Strategy(recompute="selective", recompute_layers=2)


@pytest.mark.parametrize("layers", [3, 6, 15])
def test_the_simulator_takes_the_same_partial_recomputation(layers):
    """The recomputed passes re-run that share of each layer's forward, its TP exchange overlapped tile by tile
    and its ring attention steps beside the core as in the forward, so simulator and estimator agree."""
    st = {**BASE, "recompute": "full", "recompute_layers": layers, "cp": 2, "overlap": {"tp_comm": True}}
    r = armillary.simulate("llama3-70b", "dgx-h100", st, {"seq_len": 8192, "global_batch": 64}, gpus=128)
    assert abs(r.difference) < 0.005
    full = armillary.simulate("llama3-70b", "dgx-h100", {**st, "recompute_layers": None},
                              {"seq_len": 8192, "global_batch": 64}, gpus=128)
    assert r.step_time_s < full.step_time_s


def test_the_harness_recomputes_the_fewest_layers_that_fit():
    """A row whose activations do not all fit (NeMo 24.07 Llama 3 8B at 8K tokens on 8 H100s, recompute not
    stated) gets block recomputation of the fewest layers that fit: one fewer does not fit."""
    from armillary.estimate.run import estimate_training_run
    from armillary.validation.rows import row_specs
    from armillary.validation.run import choose_candidate, read_rows

    row = next(r for r in read_rows() if r["id"] == "TR-NEMO2407-11")
    result, chosen = choose_candidate(row_specs(row))
    n = chosen.strategy.recompute_layers
    assert bool(result.feasible) and chosen.strategy.recompute.value == "full" and n is not None and n >= 1
    assert f"recompute_layers={n}" in chosen.assumptions[-1]
    if n > 1:
        fewer = chosen.strategy.model_copy(update={"recompute_layers": n - 1})
        assert not bool(estimate_training_run(chosen.model, chosen.system, fewer, chosen.workload).feasible)
