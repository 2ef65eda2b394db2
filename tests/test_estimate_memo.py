"""The estimator's kept sub-results (issue 47): one configuration's collectives per system, and a layer's forward,
kernel times, passes, activations and cost per model, each kept under its inputs. A kept value must be what
computing it afresh gives, to the bit, and its key must hold every input: the strategy fields a layer's cost reads
are checked against the code (statically and by recording the reads), and estimates that share kept parts equal
estimates made from nothing."""

from __future__ import annotations

import cProfile
import dataclasses
import inspect
import pstats
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import armillary
from armillary.comm import collectives
from armillary.comm.collectives import _collective, _send_recv, collective, send_recv
from armillary.estimate import (
    activations,
    data_parallel,
    feasibility,
    layer,
    memory,
    model_states,
    training,
    training_layers,
    training_memory,
)
from armillary.memo import KeyedCache, typed
from armillary.plan.arrays import ModelArrays, StrategyArrays, TrainingArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import ALL_GATHER, ALL_REDUCE, REDUCE_SCATTER
from armillary.specs.loading import load_system
from armillary.specs.run import load_run

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
TRAINING = ("gpt3-175b-a100", "llama3-70b-h100", "mixtral-8x7b-h100", "llama2-70b-lora-h100", "custom-model-fsdp",
            "libra-3d-gpt3")
FIELDS = {f.name for f in dataclasses.fields(StrategyArrays)}


def _estimate(name: str, fresh: bool = True, **strategy: Any) -> Any:
    """The example's estimate; `fresh`: on copies of its model and system (other objects: nothing kept applies)."""
    model, system, base, workload = load_run(EXAMPLES / f"{name}.yaml")
    st = type(base).model_validate(base.model_dump() | strategy) if strategy else base
    if fresh:
        model, system = model.model_copy(), system.model_copy(update={"device": system.device.model_copy()})
    return armillary.estimate(model, system, st, workload)


@pytest.mark.parametrize("name", TRAINING)
def test_an_estimate_from_kept_parts_equals_one_made_afresh(name: str) -> None:
    """The same run twice (the second from what the first kept) and on fresh objects: the same result, every
    number to the bit (repr writes floats exactly)."""
    first, again, fresh = _estimate(name, fresh=False), _estimate(name, fresh=False), _estimate(name)
    assert repr(first) == repr(again) == repr(fresh)


def test_strategies_sharing_kept_parts_equal_each_made_afresh() -> None:
    """A sweep over pipeline depth, ZeRO stage, recomputation and micro-batch shares layers, kernels and collectives
    between its points; each point equals its estimate made on objects of its own."""
    model, system, base, workload = load_run(EXAMPLES / "gpt3-175b-a100.yaml")
    model, system = model.model_copy(), system.model_copy()  # a cache of its own for this sweep
    for pp, vpp, zero, recompute, mb, overlap in ((16, 3, 1, "selective", 1, True), (8, 1, 1, "selective", 1, True),
                                                  (16, 3, 0, "full", 1, True), (16, 1, 1, "selective", 2, True),
                                                  (8, 3, 1, "full", 2, True), (16, 3, 1, "selective", 1, False),
                                                  (16, 3, 3, "selective", 1, False), (16, 3, 1, "selective", 1, True)):
        st = type(base).model_validate(base.model_dump() | {
            "pp": pp, "vpp": vpp, "zero": zero, "recompute": recompute, "micro_batch": mb,
            "overlap": {**base.overlap.model_dump(), "dp_grad_reduce": overlap}})
        shared = armillary.estimate(model, system, st, workload)
        alone = armillary.estimate(model.model_copy(), system.model_copy(
            update={"device": system.device.model_copy()}), st, workload)
        assert repr(shared) == repr(alone)


def _read_fields(path: Path) -> set[str]:
    """StrategyArrays fields the module's source reads as `st.<field>`."""
    return set(re.findall(r"\bst\.([a-z_0-9]+)", path.read_text())) & FIELDS


def test_the_layer_key_lists_every_strategy_field_the_code_reads() -> None:
    """Every field layer.py, layer_comm.py and tp_layouts.py (what `layer_cost` runs) read of the strategy is in
    LAYER_FIELDS, and every field kernel_passes' modules read is in KERNEL_FIELDS: a field read and not listed would
    let two strategies that differ in it share a layer's cost."""
    estimate = ROOT / "src" / "armillary" / "estimate"
    read = (_read_fields(estimate / "layer.py") | _read_fields(estimate / "layer_comm.py")
            | _read_fields(estimate / "tp_layouts.py"))
    assert read <= set(layer.LAYER_FIELDS), read - set(layer.LAYER_FIELDS)
    assert set(layer.KERNEL_FIELDS) <= set(layer.LAYER_FIELDS)
    assert "tp_layout" in read and "recompute_share" in read  # the pattern finds what it should
    stored = set()
    for part in (activations.LayerActivations.stored, activations.LayerActivations.checkpointed,
                 activations.grid_split):
        stored |= set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(part))) & FIELDS
    assert stored == set(activations.STORED_FIELDS)
    dp = _read_fields(estimate / "data_parallel.py")
    for part in (memory.gathered_weight_bytes, memory.fp8_family, memory.adapter_precision):
        dp |= set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(part))) & FIELDS
    assert dp == set(data_parallel.DATA_PARALLEL_FIELDS)
    sends = set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(training._pipeline_sends))) & FIELDS
    assert sends == set(training.SENDS_FIELDS)
    layers = set()
    for part in (training_layers._made_layers, training_layers._routed_experts, training_layers._adapters,
                 memory.saved_input_bytes, memory.fp8_family):
        layers |= set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(part))) & FIELDS
    listed = set(training_layers.LAYERS_FIELDS)
    assert layers | read | stored <= listed, (layers | read | stored) - listed
    kept = set()
    tm = training_memory
    for part in (tm.stage_memories, tm.optimizer_and_offload, tm.bytes_per_weight, tm.stage_adapters,
                 model_states.lora_states, memory.adapter_precision, tm.gathered_bytes, tm.sharded_states,
                 tm.routed_expert_weights, tm.stored_bytes,
                 training.memory_and_optimizer, memory.weight_bytes_each, memory._weight_bytes_each,
                 memory.fp8_family, memory.weight_bytes, activations.logit_bytes, memory.runtime_reserve,
                 model_states.replicated_and_expert_states, model_states.replicated_and_expert_weights,
                 model_states._both_factors, model_states._state_factors, model_states._factors, memory.grad_bytes,
                 memory.optimizer_bytes,
                 memory.optimizer_step_bytes, model_states.zero_shards, activations.stage_activations,
                 activations.microbatches_in_flight):
        kept |= set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(part))) & FIELDS
    assert kept == set(training_memory.MEMORY_FIELDS), kept ^ set(training_memory.MEMORY_FIELDS)
    checks = set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(feasibility.training_checks))) & FIELDS
    assert checks == set(feasibility.CHECK_FIELDS)
    params = set(re.findall(r"\bst\.([a-z_0-9]+)", inspect.getsource(training._stage_params))) & FIELDS
    assert params == {"tp", "ep", "etp", "redundant_experts"}  # the stage parameters' key (estimate_training)


@pytest.mark.parametrize("name", TRAINING)
def test_data_parallel_costs_read_only_their_listed_fields(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`data_parallel_cost` of each example (and under each ZeRO stage), on a recording point, reads only
    DATA_PARALLEL_FIELDS and gives what the point gives."""
    seen: list[tuple[Any, ...]] = []
    original = training.data_parallel_cost

    def recorded(*args: Any, **kwargs: Any) -> Any:
        seen.append(args)
        return original(*args, **kwargs)
    monkeypatch.setattr(training, "data_parallel_cost", recorded)
    for zero in (0, 2, 3):
        _estimate(name, zero=zero)
    assert seen
    for args in seen:
        point = _Recording(args[3])
        assert repr(original(*args[:3], point, *args[4:])) == repr(original(*args))
        listed = set(data_parallel.DATA_PARALLEL_FIELDS)
        assert point.read <= listed, point.read - listed


class _Recording:
    """A strategy point that notes each field read (delegating to the point)."""

    def __init__(self, point: StrategyArrays) -> None:
        self.__dict__["_point"], self.__dict__["read"] = point, set()

    def __getattr__(self, name: str) -> Any:
        self.__dict__["read"].add(name)
        return getattr(self.__dict__["_point"], name)


@pytest.mark.parametrize("name", TRAINING)
def test_a_layer_reads_only_its_listed_fields(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`layer_cost` and `kernel_passes` of each example's layers, run on a recording point: the fields they read
    are listed (LAYER_FIELDS, KERNEL_FIELDS)."""
    seen: list[tuple[Any, ...]] = []
    cost, passes = training_layers.layer_cost, training_layers.kernel_passes

    def layer_cost(*args: Any) -> Any:
        seen.append(("cost", *args))
        return cost(*args)

    def kernel_passes(*args: Any) -> Any:
        seen.append(("kernels", *args))
        return passes(*args)
    monkeypatch.setattr(training_layers, "layer_cost", layer_cost)
    monkeypatch.setattr(training_layers, "kernel_passes", kernel_passes)
    _estimate(name)
    assert {s[0] for s in seen} == {"cost", "kernels"}
    for what, *args in seen:
        point = _Recording(args[3] if what == "kernels" else args[2])
        if what == "kernels":
            fresh = passes(args[0], args[1], args[2], point, args[4])  # type: ignore[arg-type]
            assert point.read <= set(layer.KERNEL_FIELDS), point.read - set(layer.KERNEL_FIELDS)
        else:
            fresh = cost(*args[:2], point, *args[3:])  # type: ignore[arg-type]
            assert point.read <= set(layer.LAYER_FIELDS), point.read - set(layer.LAYER_FIELDS)
        assert repr(fresh) == repr(passes(*args) if what == "kernels" else cost(*args))


def test_a_kept_collective_is_the_computed_one_and_keeps_its_types() -> None:
    """A kept collective equals the computed one; 8 and 8.0 bytes are kept apart (their results differ in type),
    a sweep's arrays are not kept, and a zero-byte message is not kept (-0.0 equals 0.0 as a key only)."""
    system = load_system("dgx-a100", 64).model_copy()
    group = Placement((8.0, 2.0))
    for op in (ALL_REDUCE, ALL_GATHER, REDUCE_SCATTER):
        for n in (2.0**20, 3 * 2**27, 1 << 20):
            kept = collective(op, n, group, system)
            assert collective(op, n, group, system) is kept  # the second from what the first kept
            assert repr(kept) == repr(_collective(op, n, group, system, collectives.ALG_AUTO, None,
                                                   collectives.ANY_COMPOSITION))
        assert collective(op, 1 << 20, group, system) is not collective(op, float(1 << 20), group, system)
        swept = collective(op, np.array([1.0e6, 2.0e6]), group, system)
        assert swept is not collective(op, np.array([1.0e6, 2.0e6]), group, system)
        assert collective(op, 0.0, group, system) is not collective(op, 0.0, group, system)
    hop = send_recv(2.0**24, Placement((1.0, 2.0)), system)
    assert send_recv(2.0**24, Placement((1.0, 2.0)), system) is hop
    assert repr(hop) == repr(_send_recv(2.0**24, Placement((1.0, 2.0)), system))
    other = system.model_copy()  # another system: its own results
    assert collective(ALL_REDUCE, 2.0**20, group, other) is not collective(ALL_REDUCE, 2.0**20, group, system)


def test_keyed_cache_is_bounded_and_skips_what_does_not_hash() -> None:
    made: list[object] = []

    def make(value: object) -> object:
        made.append(value)
        return value

    class Owner:
        pass

    cache: KeyedCache[Owner, object] = KeyedCache(2, 3)
    a, b = Owner(), Owner()
    assert cache.get(a, typed(1), lambda: make("a1")) == "a1" and cache.get(a, typed(1), lambda: make("x")) == "a1"
    assert cache.get(a, typed(1.0), lambda: make("a1.0")) == "a1.0"  # 1 and 1.0 apart
    assert cache.get(b, typed(1), lambda: make("b1")) == "b1"  # per owner
    assert cache.get(a, np.zeros(2), lambda: make("arr")) == "arr"  # type: ignore[arg-type]
    assert cache.get(a, np.zeros(2), lambda: make("arr2")) == "arr2"  # type: ignore[arg-type]  # made each time
    for i in range(4):  # at most 3 a owner: typed(1) goes first
        cache.get(a, ("n", i), lambda: 0)
    assert cache.get(a, typed(1), lambda: make("again")) == "again"
    assert made == ["a1", "a1.0", "b1", "arr", "arr2", "again"]


@pytest.mark.parametrize("name", TRAINING)
def test_stored_activations_read_only_their_listed_fields(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`LayerActivations.stored` and `.checkpointed` of each example's layers, on a recording point, read only
    STORED_FIELDS."""
    seen: list[Any] = []
    original = training_layers.LayerKind

    def kind(cost: Any, calls: Any, acts: Any, *rest: Any) -> Any:
        seen.append(acts)
        return original(cost, calls, acts, *rest)
    monkeypatch.setattr(training_layers, "LayerKind", kind)
    _estimate(name)
    assert seen
    _, system, strategy, _ = load_run(EXAMPLES / f"{name}.yaml")
    for recompute in ("selective", "full"):
        st = StrategyArrays.of(strategy.model_copy(update={"recompute": recompute}), system.devices // 8)
        for acts in seen:
            recorder = _Recording(st)
            assert (acts.stored(recorder), acts.checkpointed(recorder)) == (acts.stored(st), acts.checkpointed(st))
            assert recorder.read <= set(activations.STORED_FIELDS), recorder.read - set(activations.STORED_FIELDS)


@pytest.mark.parametrize("name", TRAINING)
def test_the_layers_read_only_their_listed_fields(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`_made_layers` of each example, on a recording point, reads only LAYERS_FIELDS and gives what the point
    gives."""
    seen: list[tuple[Any, ...]] = []
    original = training_layers._made_layers

    def recorded(*args: Any) -> Any:
        seen.append(args)
        return original(*args)
    monkeypatch.setattr(training_layers, "_made_layers", recorded)
    _estimate(name)
    assert seen
    for m, st, *rest in seen:
        point = _Recording(st)
        assert repr(original(m, point, *rest)) == repr(original(m, st, *rest))
        assert point.read <= set(training_layers.LAYERS_FIELDS), point.read - set(training_layers.LAYERS_FIELDS)


@pytest.mark.parametrize("name", TRAINING)
def test_memory_and_optimizer_read_only_their_listed_fields(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`memory_and_optimizer` of each example (and offloading, under ZeRO 3), on a recording point, reads only
    MEMORY_FIELDS and gives what the point gives."""
    seen: list[tuple[Any, ...]] = []
    original = training.memory_and_optimizer

    def recorded(*args: Any) -> Any:
        seen.append(args)
        return original(*args)
    monkeypatch.setattr(training, "memory_and_optimizer", recorded)
    _estimate(name)
    _estimate(name, zero=3)
    _estimate(name, offload={"optimizer": True, "activations": True})
    assert seen or name == "llama2-70b-lora-h100"
    for m, st, *rest in seen:
        point = _Recording(st)
        assert repr(original(m, point, *rest)) == repr(original(m, st, *rest))
        assert point.read <= set(training_memory.MEMORY_FIELDS), point.read - set(training_memory.MEMORY_FIELDS)


@pytest.mark.parametrize("name", TRAINING)
def test_shape_rules_read_only_their_listed_fields(name: str) -> None:
    """`training_checks` of each example, on a recording point, reads only CHECK_FIELDS, and a shape that fails
    keeps its reasons when another point of the same shape takes the kept verdict."""
    model, system, strategy, workload = load_run(EXAMPLES / f"{name}.yaml")
    m, w = ModelArrays.of(model), TrainingArrays.of(workload)
    st = StrategyArrays.of(strategy, system.devices // (strategy.tp * strategy.pp * strategy.cp))
    point = _Recording(st)
    assert [c.ok for c in feasibility.training_checks(m, point, w, system.devices)] == [
        c.ok for c in feasibility.training_checks(m, st, w, system.devices)]
    assert point.read <= set(feasibility.CHECK_FIELDS), point.read - set(feasibility.CHECK_FIELDS)
    odd = dataclasses.replace(st, micro_batch=7.0)  # a batch it does not divide, twice (the second kept)
    first = feasibility.shape_rules(m, odd, w, system.devices)
    again = feasibility.shape_rules(m, dataclasses.replace(odd, recompute=2.0), w, system.devices)
    assert first == again and not first[0] and first[1]


def test_a_point_differing_in_what_layers_do_not_read_takes_the_kept_layers(monkeypatch: pytest.MonkeyPatch) -> None:
    """Counted: a second point that differs in ZeRO stage and data-parallel overlap only (neither read by a layer)
    makes no layer, kernel or collective; a third with another micro-batch makes its layers again."""
    model, system, base, workload = load_run(EXAMPLES / "gpt3-175b-a100.yaml")
    model, system = model.model_copy(), system.model_copy()
    made: list[str] = []
    for module, name in ((training_layers, "_made_layers"), (training_layers, "kernel_passes"),
                         (collectives, "_collective")):
        original = getattr(module, name)

        def counted(*args: Any, _name: str = name, _f: Any = original) -> Any:
            made.append(_name)
            return _f(*args)
        monkeypatch.setattr(module, name, counted)

    def point(**changes: Any) -> Any:
        return armillary.estimate(model, system, type(base).model_validate(base.model_dump() | changes), workload)
    point()
    assert made.count("_made_layers") == 1 and "_collective" in made
    made.clear()
    point(zero=0, overlap={**base.overlap.model_dump(), "dp_grad_reduce": False})
    assert "_made_layers" not in made and "kernel_passes" not in made
    made.clear()
    point(micro_batch=2)
    assert made.count("_made_layers") == 1 and "kernel_passes" in made


def test_one_kept_estimate_stays_within_its_python_calls() -> None:
    """The quick-start example's estimate() from kept parts: about 280 Python calls (1,114 before issue 47's kept
    parts); a deterministic guard that the look-ups stay look-ups."""
    model, system, strategy, workload = load_run(EXAMPLES / "gpt3-175b-a100.yaml")
    armillary.estimate(model, system, strategy, workload)
    counter = cProfile.Profile()
    counter.runcall(lambda: [armillary.estimate(model, system, strategy, workload) for _ in range(5)])
    calls = pstats.Stats(counter).total_calls / 5  # type: ignore[attr-defined]
    assert calls < 400, f"{calls:.0f} Python calls per estimate"


def test_lora_workloads_keep_their_own_parts() -> None:
    """Two LoRA workloads (adapter ranks 8 and 64) on the same model, system and strategy objects: each equals its
    estimate made afresh (the kept layers, data-parallel costs and memory are the workload's own)."""
    model, system, strategy, workload = load_run(EXAMPLES / "llama2-70b-lora-h100.yaml")
    model, system = model.model_copy(), system.model_copy()
    assert workload.finetune is not None
    results = []
    for rank in (8, 64, 8):
        lora = type(workload).model_validate(workload.model_dump() | {
            "finetune": workload.finetune.model_dump() | {"rank": rank}})
        shared = armillary.estimate(model, system, strategy, lora)
        alone = armillary.estimate(model.model_copy(), system.model_copy(
            update={"device": system.device.model_copy()}), strategy, lora)
        assert repr(shared) == repr(alone)
        results.append(shared)
    assert results[0].memory_hbm.total != results[1].memory_hbm.total
    assert repr(results[0]) == repr(results[2])
