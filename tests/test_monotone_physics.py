"""A faster resource never slows a step: twice the FLOP/s, twice the HBM or network bandwidth, half the
network latency, in the estimator (whole strategy spaces, evaluated as arrays as the search does) and in
the event simulator. Overlap is one schedule: a faster pass may expose more of a communication hidden
behind it, but the step as a whole can only get shorter."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as hs

from armillary.errors import SpecError
from armillary.estimate.run import estimate_training_run
from armillary.estimate.training import estimate_training
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.search.space import StrategySpace, chunk_strategy, resolve_axes
from armillary.simulate.run import simulate_training
from armillary.specs.loading import load_model, load_strategy, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training


def faster(system: System, what: str) -> System:
    return system.scaled(**{"flops": {"flops": 2.0}, "hbm": {"hbm_bandwidth": 2.0},
                            "network": {"network_bandwidth": 2.0}, "latency": {"latency": 0.5}}[what])


RESOURCES = ("flops", "hbm", "network", "latency")
# spaces small enough for CI, wide enough to mix every overlap, ZeRO stage, offload and recompute mode
CASES = [
    ("llama3-8b", "dgx-h100", 64, Training(seq_len=4096, global_batch=128), Strategy(attention="flash")),
    ("mixtral-8x7b", "dgx-h100", 32, Training(seq_len=4096, global_batch=64), Strategy(attention="flash")),
    ("deepseek-v2-lite", "dgx-a100", 16, Training(seq_len=2048, global_batch=64), Strategy()),
]
SPACE = StrategySpace(vpp=(1, 2), micro_batch=(1, 2), ep=(1, 2, 4), offload_optimizer=(False, True),
                      offload_activations=(False, True))


def step_times(model_name: str, system: System, workload: Training, base: Strategy,
               points: int = 3000) -> tuple[np.ndarray, np.ndarray]:
    """Step time and feasibility of `points` points of SPACE drawn at random (the same for every system),
    evaluated as arrays as the search evaluates them."""
    model = load_model(model_name)
    axes = resolve_axes(SPACE, model, system.devices, system.devices_per_node, base, system.device.hbm.capacity)
    chosen = np.random.default_rng(0).choice(axes.size, size=min(points, axes.size), replace=False)
    coded = {name: values[chosen] for name, values in axes.decode(0, axes.size).items()}
    st = chunk_strategy(StrategyArrays.of(base, 1), coded, system.devices, True)
    with np.errstate(all="ignore"):
        r = estimate_training(ModelArrays.of(model), st, TrainingArrays.of(workload), system)
    shape = (len(chosen),)
    step = np.broadcast_to(np.asarray(r.step_time_s, float), shape)
    return step, np.broadcast_to(np.asarray(r.feasible, bool), shape) & np.isfinite(step) & (step > 0)


@pytest.mark.parametrize(("model", "system", "gpus", "workload", "base"), CASES)
def test_a_faster_resource_never_slows_an_estimated_step(model, system, gpus, workload, base):
    sysm = load_system(system, gpus)
    step, feasible = step_times(model, sysm, workload, base)
    assert feasible.sum() >= 700  # 2,000+ feasible configurations over the cases (about 1,000 each)
    for what in RESOURCES:
        quicker, _ = step_times(model, faster(sysm, what), workload, base)
        slower = feasible & (quicker > step * (1 + 1e-9))
        assert not slower.any(), f"{what}: {slower.sum()} of {feasible.sum()} points slower"


SIMULATED = int(os.environ.get("SIMULATED_CONFIGURATIONS", "2000"))


def random_configurations(count: int, seed: int = 0):
    """`count` random feasible training configurations small enough to simulate in milliseconds: a dense
    model of 2-8 layers on 8-32 GPUs, every parallel degree, ZeRO stage, recompute mode, overlap flag and
    optimizer offload drawn at random (the estimator's feasibility decides what is kept)."""
    rng = np.random.default_rng(seed)
    found = 0
    while found < count:
        hidden = int(rng.choice([256, 512, 1024]))
        model = load_model({"name": "small", "layers": int(rng.choice([2, 4, 8])), "hidden": hidden, "heads": 8,
                            "ffn": 4 * hidden, "vocab": 8192, "max_seq_len": 4096})
        gpus = int(rng.choice([8, 16, 32]))
        system = load_system(str(rng.choice(["dgx-h100", "dgx-a100"])), gpus)
        tp, pp = int(rng.choice([1, 2, 4, 8])), int(rng.choice([1, 2, 4]))
        flags = rng.random(6) < 0.5
        spec = {"tp": tp, "pp": pp, "vpp": 2 if pp > 1 and model.layers % (2 * pp) == 0 and flags[0] else 1,
                "zero": int(rng.integers(0, 4)), "recompute": str(rng.choice(["none", "selective", "full"])),
                "micro_batch": int(rng.choice([1, 2])), "attention": "flash",
                "overlap": {"tp_comm": bool(flags[1]), "dp_grad_reduce": bool(flags[2]),
                            "param_gather": bool(flags[3])}, "offload": {"optimizer": bool(flags[4])}}
        dp = gpus // (tp * pp)
        workload = Training(seq_len=int(rng.choice([512, 1024, 2048])),
                            global_batch=max(dp, 1) * spec["micro_batch"] * int(rng.choice([1, 2, 4])))
        try:
            strategy = load_strategy(spec)
            if not bool(estimate_training_run(model, system, strategy, workload).feasible):
                continue
        except (SpecError, ValueError):
            continue
        found += 1
        yield model, system, strategy, workload


def test_a_faster_resource_never_slows_a_simulated_step_over_random_configurations():
    """Every drawn configuration simulated as it is and with each resource twice as fast (latency halved)."""
    slower = dict.fromkeys(RESOURCES, 0)
    for model, system, strategy, workload in random_configurations(SIMULATED):
        base = simulate_training(model, system, strategy, workload).step_time_s
        for what in RESOURCES:
            quicker = simulate_training(model, faster(system, what), strategy, workload).step_time_s
            slower[what] += quicker > base * (1 + 1e-9)
    assert slower == dict.fromkeys(RESOURCES, 0)


@settings(max_examples=6, deadline=None)
@given(case=hs.sampled_from([
    ("llama3-8b", "dgx-h100", 16, {"tp": 4, "pp": 2, "zero": 3, "overlap": {"tp_comm": True}}, 32),
    ("mixtral-8x7b", "dgx-h100", 16, {"tp": 2, "pp": 2, "ep": 4, "zero": 1, "attention": "flash"}, 32),
    ("llama3-8b", "dgx-a100", 16, {"tp": 8, "pp": 2, "vpp": 2, "recompute": "full",
                                   "offload": {"activations": True}}, 16),
]), what=hs.sampled_from(RESOURCES))
def test_a_faster_resource_never_slows_a_simulated_step(case, what):
    model, system, gpus, strategy, global_batch = case
    args = (load_model(model), load_system(system, gpus))
    st, w = load_strategy(strategy), Training(seq_len=2048, global_batch=global_batch)
    base = simulate_training(*args, st, w).step_time_s
    assert simulate_training(args[0], faster(args[1], what), st, w).step_time_s <= base * (1 + 1e-9)


def test_a_pass_with_overlapped_tp_waits_for_its_compute():
    """The one configuration of the benchmark's 20,000 that came out 0.9% slower with twice the FLOP/s (ZeRO-3,
    tp 2, pp 2, TP overlap): its pipeline sends followed the overlapped exchange without waiting for the GEMMs
    beside it, so the slower-compute step was too fast. Now no faster resource slows it."""
    model = load_model({"name": "small", "layers": 4, "hidden": 1024, "heads": 8, "ffn": 4096, "vocab": 8192,
                        "max_seq_len": 4096})
    system = load_system("dgx-h100", 32)
    st = load_strategy({"tp": 2, "pp": 2, "zero": 3, "recompute": "selective", "attention": "flash",
                        "overlap": {"tp_comm": True}})
    w = Training(seq_len=512, global_batch=16)
    base = simulate_training(model, system, st, w).step_time_s
    for what in RESOURCES:
        assert simulate_training(model, faster(system, what), st, w).step_time_s <= base * (1 + 1e-9), what
