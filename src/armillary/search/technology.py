"""Technology-scaling what-ifs (Optimus-style): a hypothetical device or system on another logic node, HBM
generation and SerDes generation; die and chiplet cost by node; a generation-over-generation speed-up
chain; and the compute- or memory-boundedness of each kernel of a layer.

Optimus (Kundu, Guo, BanaGozar et al., "Performance Modeling and Workload Analysis of Distributed Large
Language Model Training and Inference", imec / UCLA, arXiv:2407.14645, 2024; the chiplet cost model in Guo,
Kundu et al., arXiv:2507.02456, 2025) explores logic, memory and network scaling per technology node. The
numbers here are the data files of `presets/technology/` (each with its source); the rules are:

- logic: peak FLOP/s scales by the node's logic density within the same die area, and by its energy per
  operation within the same power; the lower of the two binds (`logic_scale`) [derived: FLOP/s ~ matrix
  units x clock; at a fixed area the unit count follows density, at a fixed power the rate follows FLOP/J];
- memory: HBM bandwidth and capacity scale by the per-stack figures of the generation, at the same number
  of stacks;
- network: each dimension's bandwidth scales by the SerDes lane rate, at the same lane count.

Pure functions of frozen specs (`Device.model_copy(update=...)`); nothing here is a prediction of a product.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from armillary.errors import SpecError
from armillary.presets.registry import preset_dir, read_data_file
from armillary.specs.device import Device
from armillary.specs.system import System
from armillary.units import parse_quantity

# not a preset kind of the registry (no file here is one spec): read directly, as presets/network/ and costs/
_DIR = preset_dir("technology")


@dataclass(frozen=True)
class Node:
    """A logic node against the reference node (N7): logic density and FLOP per joule ratios."""

    name: str
    density: float
    energy_efficiency: float  # FLOP per joule at the same speed, against the reference (1 / power ratio)


@dataclass(frozen=True)
class MemoryGeneration:
    name: str
    stack_bandwidth: float  # bytes/s per stack
    stack_capacity: float  # bytes per stack


@dataclass(frozen=True)
class SerdesGeneration:
    name: str
    lane_rate: float  # bytes/s per lane and direction


@dataclass(frozen=True)
class Technology:
    """The technology preset family (`presets/technology/*.yaml`)."""

    nodes: Mapping[str, Node]
    memories: Mapping[str, MemoryGeneration]
    serdes: Mapping[str, SerdesGeneration]
    device_node: Mapping[str, str]  # preset device -> node
    device_memory: Mapping[str, str]
    device_serdes: Mapping[str, str]
    wafer_price: Mapping[str, float]  # USD per wafer, by node
    defect_density_per_cm2: float
    wafer_diameter_mm: float


def _read(name: str) -> dict[str, Any]:
    data = read_data_file(_DIR / f"{name}.yaml")
    if not isinstance(data, dict):
        raise SpecError(f"presets/technology/{name}.yaml: expected a mapping")
    return data


def _chained(nodes: Mapping[str, Mapping[str, Any]], reference: str) -> dict[str, Node]:
    """Each node's density and energy-efficiency ratios against `reference`, multiplying the published
    ratios along its chain of `vs` nodes."""

    def resolve(name: str, seen: tuple[str, ...] = ()) -> tuple[float, float]:
        if name in seen:
            raise SpecError(f"presets/technology/logic.yaml: node {name!r} is its own ancestor")
        entry = nodes[name]
        if name == reference or "vs" not in entry:
            return 1.0, 1.0
        density, efficiency = resolve(str(entry["vs"]), (*seen, name))
        return density * float(entry["density"]), efficiency / float(entry["power_at_iso_speed"])

    return {name: Node(name, *resolve(name)) for name in nodes}


@functools.cache
def technology() -> Technology:
    """The shipped technology presets (read once)."""
    logic, memory, network, cost = (_read(n) for n in ("logic", "memory", "network", "cost"))
    memories = {name: MemoryGeneration(name, parse_quantity(g["stack_bandwidth"], "bytes_per_s"),
                                       parse_quantity(g["stack_capacity"], "bytes"))
                for name, g in memory["generations"].items()}
    serdes = {name: SerdesGeneration(name, parse_quantity(g["lane_rate"], "bytes_per_s"))
              for name, g in network["generations"].items()}
    return Technology(
        nodes=_chained(logic["nodes"], str(logic["reference"])), memories=memories, serdes=serdes,
        device_node=dict(logic.get("devices", {})), device_memory=dict(memory.get("devices", {})),
        device_serdes=dict(network.get("devices", {})),
        wafer_price={n: float(v["wafer_price"]) for n, v in cost["nodes"].items()},
        defect_density_per_cm2=float(cost["defect_density_per_cm2"]),
        wafer_diameter_mm=float(cost["wafer_diameter_mm"]))


def _pick(table: Mapping[str, Any], name: str, what: str) -> Any:
    try:
        return table[name]
    except KeyError:
        raise SpecError(f"{what} {name!r}: one of {', '.join(sorted(table))}") from None


def logic_scale(base_node: str, target_node: str, area_ratio: float = 1.0, power_ratio: float = 1.0) -> float:
    """Peak FLOP/s of a design moved from `base_node` to `target_node` with `area_ratio` times the die area
    and `power_ratio` times the power: min(density ratio x area ratio, FLOP/J ratio x power ratio). On the
    same area and power the node's energy efficiency usually binds (N7 -> N2: 3.4x density, 2.9x FLOP/J)."""
    if area_ratio <= 0 or power_ratio <= 0:
        raise SpecError(f"area_ratio {area_ratio}, power_ratio {power_ratio}: both must be positive")
    tech = technology()
    base, target = _pick(tech.nodes, base_node, "node"), _pick(tech.nodes, target_node, "node")
    return min(target.density / base.density * area_ratio,
               target.energy_efficiency / base.energy_efficiency * power_ratio)


def derive_device(base: Device, base_node: str, target_node: str, base_memory: str | None = None,
                  target_memory: str | None = None, area_ratio: float = 1.0, power_ratio: float = 1.0,
                  name: str | None = None) -> Device:
    """A hypothetical `base` on `target_node` (matrix and vector peaks x `logic_scale`) with its HBM moved
    from generation `base_memory` to `target_memory` (bandwidth and capacity x the per-stack ratios, the same
    stacks); board power x `power_ratio`. Efficiency curves are kept (read at equal kernel size, as for a
    sibling chip): a what-if, labelled in `sources.technology`."""
    tech = technology()
    flops = logic_scale(base_node, target_node, area_ratio, power_ratio)
    update: dict[str, Any] = {
        "name": name or f"{base.name} @ {target_node}" + (f" + {target_memory}" if target_memory else ""),
        "matrix_flops": {p: flops * v for p, v in base.matrix_flops.items()},
        "vector_flops": {p: flops * v for p, v in base.vector_flops.items()},
        "power": None if base.power is None else base.power * power_ratio,
        "calibrated_on": (),
    }
    note = f"what-if (search.technology): {base_node} -> {target_node}, FLOP/s x {flops:.3g}"
    if (base_memory is None) != (target_memory is None):
        raise SpecError("base_memory and target_memory: give both (HBM generations) or neither")
    if base_memory is not None and target_memory is not None:
        old, new = (_pick(tech.memories, g, "HBM generation") for g in (base_memory, target_memory))
        bw, cap = new.stack_bandwidth / old.stack_bandwidth, new.stack_capacity / old.stack_capacity
        hbm = base.hbm.model_copy(update={"bandwidth": bw * base.hbm.bandwidth, "capacity": cap * base.hbm.capacity})
        update["memory"] = (hbm, *base.memory[1:])
        note += f"; {base_memory} -> {target_memory}: HBM bandwidth x {bw:.3g}, capacity x {cap:.3g}"
    update["sources"] = {**base.sources, "technology": note}
    return base.model_copy(update=update)


def derive_system(base: System, base_node: str, target_node: str, base_memory: str | None = None,
                  target_memory: str | None = None, base_serdes: str | None = None,
                  target_serdes: str | None = None, dimensions: Sequence[int] | None = None,
                  area_ratio: float = 1.0, power_ratio: float = 1.0) -> System:
    """`base` with its device derived (`derive_device`) and the bandwidth of each network dimension in
    `dimensions` (default: all) x the SerDes lane-rate ratio of `target_serdes` over `base_serdes`."""
    tech = technology()
    device = derive_device(base.device, base_node, target_node, base_memory, target_memory, area_ratio, power_ratio)
    network = base.network
    if (base_serdes is None) != (target_serdes is None):
        raise SpecError("base_serdes and target_serdes: give both (SerDes generations) or neither")
    if base_serdes is not None and target_serdes is not None:
        ratio = (_pick(tech.serdes, target_serdes, "SerDes generation").lane_rate
                 / _pick(tech.serdes, base_serdes, "SerDes generation").lane_rate)
        chosen = set(range(len(network)) if dimensions is None else dimensions)
        network = tuple(d.model_copy(update={"bandwidth": ratio * d.bandwidth}) if i in chosen else d
                        for i, d in enumerate(network))
    return base.model_copy(update={"device": device, "network": network,
                                   "name": f"{base.name} @ {target_node}"})


def preset_generations(device_preset: str) -> tuple[str, str, str]:
    """(logic node, HBM generation, SerDes generation) of a preset device, from the technology presets."""
    tech = technology()
    key = device_preset.lower()
    return (_pick(tech.device_node, key, "device preset (logic.yaml devices)"),
            _pick(tech.device_memory, key, "device preset (memory.yaml devices)"),
            _pick(tech.device_serdes, key, "device preset (network.yaml devices)"))


@dataclass(frozen=True)
class DieCost:
    """Silicon cost of one device's logic: `chiplets` dies of `die_area_mm2` each."""

    node: str
    chiplets: int
    die_area_mm2: float
    dies_per_wafer: float
    die_yield: float
    cost_per_good_die: float  # USD
    cost: float  # USD, all chiplets


def die_cost(area_mm2: float, node: str, chiplets: int = 1) -> DieCost:
    """Silicon cost of `area_mm2` of logic on `node` split over `chiplets` equal dies: wafer price / (gross
    dies per wafer x Poisson yield exp(-A D0)) per die (presets/technology/cost.yaml). Packaging, test and
    die-to-die interface area are not priced."""
    if area_mm2 <= 0 or chiplets < 1:
        raise SpecError(f"area {area_mm2} mm2, {chiplets} chiplets: need a positive area and at least one die")
    tech = technology()
    price = _pick(tech.wafer_price, node, "node (cost.yaml)")
    a = area_mm2 / chiplets
    d = tech.wafer_diameter_mm
    gross = math.pi * (d / 2) ** 2 / a - math.pi * d / math.sqrt(2 * a)
    if gross < 1:
        raise SpecError(f"a die of {a:.0f} mm2 does not fit a {d:.0f} mm wafer")
    good = math.exp(-a / 100 * tech.defect_density_per_cm2)
    per_die = price / (gross * good)
    return DieCost(node, chiplets, a, gross, good, per_die, per_die * chiplets)


# --- the A100 -> B200 speed-up chain (docs/technology.md) ---------------------------------------------------


@dataclass(frozen=True)
class Step:
    """One configuration of a speed-up chain: a system preset and the strategy fields that differ."""

    label: str
    system: str
    strategy: Mapping[str, Any]


@dataclass(frozen=True)
class StepResult:
    label: str
    step_time_s: float
    speedup: float  # against the chain's first step
    strategy: Any  # the fastest Strategy found


def training_chain(model: str, steps: Sequence[Step], workload: Mapping[str, Any], gpus: int,
                   space: Mapping[str, Any] | None = None) -> tuple[StepResult, ...]:
    """Each step's fastest training strategy (`search.run.search`, as `armillary search`, over `space`;
    default: tp up to the scale-up domain, ZeRO 0 / 1) and its speed-up over the first step's: the
    strategy is re-tuned for every system, as a published generation comparison would."""
    from armillary.search.executors import serial
    from armillary.search.run import Objective, search
    from armillary.search.space import StrategySpace
    from armillary.specs.loading import load_model, load_spec, load_strategy, load_system, load_workload
    from armillary.specs.workload import Training

    m, w = load_model(model), load_workload(dict(workload))
    if not isinstance(w, Training):
        raise SpecError("workload: a training chain needs a training workload")
    out: list[StepResult] = []
    for step in steps:
        system = load_system(step.system, gpus)
        sp = dict(space) if space is not None else {
            "tp": [t for t in (1, 2, 4, 8, 16, 32, 64) if t <= system.devices_per_node], "zero": [0, 1]}
        found = search(m, system, w, load_strategy(dict(step.strategy)), load_spec(StrategySpace, sp, "space"),
                       Objective.TIME, 1, executor=serial)
        if not found.top:
            raise SpecError(f"{step.label}: no feasible strategy")
        best = found.top[0]
        t = float(best.step_time_s)
        out.append(StepResult(step.label, t, (out[0].step_time_s if out else t) / t, best.strategy))
    return tuple(out)


def serving_chain(model: str, steps: Sequence[tuple[Step, Mapping[str, Any]]], workload: Mapping[str, Any],
                  gpus: int, tpot_limit_s: float) -> tuple[StepResult, ...]:
    """Each step's best static-batch serving configuration under a TPOT limit (`search_inference` with an
    `InferenceSpace`: tp up to the node, batch 1-512, the step's own space fields such as `weights` and
    `kv_cache`) and its output tokens/s per device over the first step's (`speedup`; `step_time_s` holds
    the TPOT of the configuration found)."""
    from armillary.search.inference import InferenceSpace, search_inference
    from armillary.specs.loading import load_model, load_spec, load_strategy, load_system, load_workload
    from armillary.specs.workload import Inference

    m, w = load_model(model), load_workload(dict(workload))
    if not isinstance(w, Inference):
        raise SpecError("workload: a serving chain needs an inference workload")
    out: list[StepResult] = []
    first = 0.0
    for step, fields in steps:
        space = load_spec(InferenceSpace, {"tpot_limit_s": tpot_limit_s, "tp": [1, 2, 4, 8], **fields}, "space")
        found = search_inference(m, load_system(step.system, gpus), w, load_strategy(dict(step.strategy)), space, 1)
        if not found.top:
            raise SpecError(f"{step.label}: no configuration within TPOT {tpot_limit_s} s")
        best = found.top[0]
        rate = float(best.output_tokens_per_s_per_device)
        first = first or rate
        out.append(StepResult(step.label, float(best.tpot_s), rate / first, best.strategy))
    return tuple(out)


# --- compute- or memory-bound kernels --------------------------------------------------------------------


@dataclass(frozen=True)
class OpBound:
    """One kernel of a layer's forward on one device: its roofline terms and which one binds."""

    name: str
    flop: float
    bytes: float
    intensity: float  # FLOP per HBM byte
    compute_s: float  # FLOPs at the peak x the GEMM efficiency for its size (0 for a stream)
    memory_s: float  # HBM bytes at the streaming rate
    bound: Literal["compute", "memory"]


_GEMMS = ("qkv", "attention_scores", "attention_over_v", "out_proj", "mlp_in", "mlp_out")
_STREAMS = ("norms", "residuals", "softmax", "activation", "rotary")
_SIXTEEN_BIT = ("attention_scores", "attention_over_v", "softmax")  # kept in bf16 by quantized recipes


def op_boundedness(model: Any, device: Device | str, tokens: int, seq_len: int | None = None, tp: int = 1,
                   precision: str = "bf16", block_format: str = "none",
                   decode: bool = False) -> tuple[OpBound, ...]:
    """Which kernels of one dense layer's forward are compute- and which memory-bound on `device`, as the
    estimator prices them (`cost.compute.kernel_times`: max(FLOPs / (efficiency x peak), bytes / HBM rate)).
    Training or prefill: `tokens` sequences of `seq_len` (a micro-batch) on one of `tp` ranks. `decode`:
    one new token for each of `tokens` sequences (weight GEMMs at M = tokens; the attention core over a KV
    cache is priced elsewhere and left out here). The estimator keeps only each kernel's time
    (`LayerKernels`); this recomputes the two roofline terms with the same functions."""
    import numpy as np

    from armillary.cost.compute import kernel_times, stream_time
    from armillary.plan.arrays import ModelArrays
    from armillary.plan.codes import BLOCK_FORMAT, PRECISION
    from armillary.specs.device import Precision
    from armillary.specs.loading import load_device, load_model
    from armillary.specs.training_precision import BlockFormat, TrainingPrecision
    from armillary.workload.transformer import layer_forward

    dev = load_device(device)
    m = ModelArrays.of(load_model(model))
    code = PRECISION.code(TrainingPrecision(precision))
    fmt = BLOCK_FORMAT.code(BlockFormat(block_format))
    if decode:  # a block format serving refuses (int8: AQT's training recipe) is refused here too
        from armillary.estimate.inference_precision import serving_block_format
        from armillary.specs.strategy import Strategy

        serving_block_format(Strategy.model_validate({"precision": precision, "block_format": block_format}))
    element = 1.0 if precision == "fp8" else 2.0
    s = 1 if decode else (seq_len or 2048)
    # serving stores the weights in the block format (docs/fp4.md: W4A4 without workload.weights)
    weights = Precision(block_format).bytes if decode and block_format != "none" else None
    fw = layer_forward(m, float(tokens), float(s), float(tp), 0.0, element, weight_bytes=weights)
    names = [n for n in (*_GEMMS, *_STREAMS) if not (decode and n in _SIXTEEN_BIT)]
    out: list[OpBound] = []
    for n in names:
        op = getattr(fw, n)
        flop, moved = float(op.flop), float(op.bytes)
        if flop <= 0 and moved <= 0:
            continue
        sixteen = n in _SIXTEEN_BIT
        compute = 0.0
        if flop > 0:  # the compute term alone (with a device's GEMM latency floor where it lists one)
            compute = float(np.asarray(kernel_times((replace(op, bytes=0.0),), dev, code, sixteen_bit=sixteen,
                                                    block_format=0.0 if sixteen else fmt))[0]) - dev.kernel_overhead
        memory = float(stream_time(moved, dev))
        out.append(OpBound(n, flop, moved, flop / moved if moved else math.inf, compute, memory,
                           "compute" if compute > memory else "memory"))
    return tuple(out)
