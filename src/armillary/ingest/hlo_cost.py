"""Cost every instruction of an HLO module on a target system, with armillary's own models: kernels by the
device roofline with its efficiency curves (`cost/compute.py`), collectives by the comm layer on the
system's network dimensions (`comm/collectives.py`). Loops count their trip counts; a conditional counts
its slowest branch (the one a worst-case step takes).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

from armillary.comm.collectives import collective, send_recv
from armillary.cost.compute import fused_attention_time, kernel_times
from armillary.errors import SpecError
from armillary.ingest.hlo_attrs import called, loop_parts, replica_groups, source_target_pairs, trip_count
from armillary.ingest.hlo_parse import Computation, HloModule, Instruction
from armillary.ingest.hlo_work import (
    CONTROL,
    FREE,
    OpKind,
    Work,
    collective_of,
    instruction_work,
    is_synchronous,
    message_bytes,
)
from armillary.plan.codes import PRECISION
from armillary.plan.placement import Placement
from armillary.simulate.engine import paused_gc
from armillary.specs.communication import Collective
from armillary.specs.strategy import TrainingPrecision
from armillary.specs.system import System
from armillary.workload.ops import Op

_PRECISION = {"bf16": TrainingPrecision.BF16, "f16": TrainingPrecision.FP16}
# the device presets describe cuDNN fused attention with FlashAttention-3's efficiency (`Attention.FLASH3`)
CUDNN_ATTENTION_VERSION = 3.0


@dataclass(frozen=True, slots=True)
class InstructionCost:
    kind: OpKind
    seconds: float  # alone on an idle device and network
    flop: float
    bytes: float  # moved through memory (kernels) or the message (collectives, nccl-tests convention)
    collective: Collective | None = None
    groups: tuple[tuple[int, ...], ...] = ()  # replica groups, or source-target pairs of a permute
    asynchronous: bool = False  # the -start of an async pair: runs beside compute until its -done
    outermost: int = 0  # outermost network dimension the collective crosses


@dataclass(frozen=True)
class KindTotal:
    count: int
    seconds: float
    flop: float
    bytes: float


@dataclass(frozen=True)
class ModuleCost:
    """Costs per executed computation (aligned with its instructions; None: no kernel, or control flow),
    trip counts of the while loops, and totals per op kind over one execution of the entry computation."""

    module: HloModule
    system: System
    costs: dict[str, tuple[InstructionCost | None, ...]]
    trips: dict[tuple[str, str], int]  # (computation, while instruction) -> iterations
    by_kind: dict[OpKind, KindTotal]

    @property
    def serial_seconds(self) -> float:
        """Every kernel and collective one after another: an upper bound of the step."""
        return sum(t.seconds for t in self.by_kind.values())


def cost_module(module: HloModule, system: System) -> ModuleCost:
    """Cost `module` on `system` (which must have at least the module's partitions x replicas devices)."""
    with paused_gc():  # many small acyclic objects: collections would rescan them all
        return _cost_module(module, system)


MAX_NESTING = 100  # computations calling computations: the unrolling recurses once per level
MAX_EXECUTED = 20_000_000  # instructions of one execution, loops unrolled (a few minutes of graph building)
# a while loop whose unrolled instructions (trip count x one iteration's) exceed this is simulated
# symbolically (`hlo_graph`: WARMUP_TRIPS iterations unrolled, the rest one repeated block)
UNROLL_LIMIT = 1_000_000
WARMUP_TRIPS = 2
# iterations a symbolic loop builds: its warm-up in place, and warm-up and warm-up + 1 alone (its period)
SYMBOLIC_TRIPS = 3 * WARMUP_TRIPS + 1


def symbolic(trips: int, iteration: int, unroll_limit: float) -> bool:
    """Whether a loop of `trips` iterations of `iteration` instructions each is simulated symbolically."""
    return trips > SYMBOLIC_TRIPS and trips * iteration > unroll_limit


def _call_depths(module: HloModule) -> dict[str, int]:
    """The longest chain of calls below each computation; a computation that calls itself, directly or
    through others, is refused (HLO has no recursion)."""
    for name, comp in module.computations.items():
        for inst in comp.instructions:
            if inst.opcode == "while" and not all(loop_parts(inst)):
                raise SpecError(f"HLO module {module.name!r}: while loop {inst.name[:60]!r} in {name[:60]!r} "
                                "names no condition or no body computation")
            missing = [c for c in called(inst) if c not in module.computations]
            if missing:
                raise SpecError(f"HLO module {module.name!r}: {inst.name[:60]!r} in {name[:60]!r} calls "
                                f"{missing[0][:60]!r}, which the module does not define")
    callees = {name: tuple(dict.fromkeys(c for i in comp.instructions for c in called(i)))
               for name, comp in module.computations.items()}
    depth: dict[str, int] = {}
    visiting: set[str] = set()
    for root in callees:
        if root in depth:
            continue
        stack, visiting = [(root, iter(callees[root]))], {root}
        while stack:
            node, pending = stack[-1]
            for c in pending:
                if c in visiting:
                    raise SpecError(f"HLO module {module.name!r}: computation {c!r} calls itself (through "
                                    f"{node!r}); an HLO program has no recursion")
                if c not in depth:
                    visiting.add(c)
                    stack.append((c, iter(callees[c])))
                    break
            else:
                depth[node] = 1 + max((depth[c] for c in callees[node]), default=0)
                visiting.discard(node)
                stack.pop()
    deepest = max(depth.values(), default=0)
    if deepest > MAX_NESTING:
        raise SpecError(f"HLO module {module.name!r}: calls nested {deepest} deep; at most {MAX_NESTING} are "
                        "simulated")
    return depth


def executed_instructions(module: HloModule, trips: dict[tuple[str, str], int],
                          unroll_limit: float = float("inf")) -> int:
    """Instructions one execution of the entry computation runs with its loops unrolled (a while loop's
    condition and body once per trip, a conditional's longest branch, a call in place): the work of building
    its task graph, counted before it is built. A loop past `unroll_limit` (`symbolic`) counts the
    SYMBOLIC_TRIPS iterations its graph builds."""
    return executed_counts(module, trips, unroll_limit).get(module.entry, 0)


def executed_counts(module: HloModule, trips: dict[tuple[str, str], int],
                    unroll_limit: float = float("inf")) -> dict[str, int]:
    """`executed_instructions` of every computation (one execution of it)."""
    memo: dict[str, int] = {}
    depths = _call_depths(module)
    for name in sorted(depths, key=depths.__getitem__):  # callees first
        comp = module.computations[name]
        total = len(comp.instructions)
        for inst in comp.instructions:
            inner = [memo.get(c, 0) for c in called(inst) if c in module.computations]
            if inst.opcode == "while":
                n = trips.get((name, inst.name), 1)
                total += (SYMBOLIC_TRIPS if symbolic(n, sum(inner), unroll_limit) else n) * sum(inner)
            elif inst.opcode == "conditional":
                total += max(inner, default=0)
            elif inst.opcode in CONTROL or inst.opcode == "async-start":
                total += sum(inner)
        memo[name] = total
    return memo


def _cost_module(module: HloModule, system: System) -> ModuleCost:
    devices = module.num_partitions * module.replica_count
    _call_depths(module)  # refuses recursion before anything follows calls
    work: dict[str, list[Work | tuple[Collective, OpKind, float, tuple[tuple[int, ...], ...], bool] | None]] = {}
    trips: dict[tuple[str, str], int] = {}
    for name in _executed(module, trips):
        comp = module.computations[name]
        rows: list[Work | tuple[Collective, OpKind, float, tuple[tuple[int, ...], ...], bool] | None] = []
        for inst in comp.instructions:
            rows.append(_work(inst, module, devices, comp))
        work[name] = rows
    executed = executed_instructions(module, trips, UNROLL_LIMIT)
    if executed > MAX_EXECUTED:
        raise SpecError(f"HLO module {module.name!r}: one execution runs {executed:.3g} instructions with its loops "
                        f"unrolled (trip counts x instructions, loops over {UNROLL_LIMIT:,} instructions "
                        f"{SYMBOLIC_TRIPS} iterations); at most {MAX_EXECUTED:,} are simulated")
    kernel_s = _kernel_seconds([w for rows in work.values() for w in rows if isinstance(w, Work)], system)
    comm_cache: dict[tuple[Collective, float, tuple[float, ...]], tuple[float, int]] = {}
    costs: dict[str, tuple[InstructionCost | None, ...]] = {}
    k = 0
    for name, rows in work.items():
        out: list[InstructionCost | None] = []
        for w in rows:
            if isinstance(w, Work):
                out.append(InstructionCost(w.kind, float(kernel_s[k]), w.flop, w.bytes))
                k += 1
            elif w is None:
                out.append(None)
            else:
                op, kind, size, groups, is_async = w
                seconds, outer = comm_seconds(op, size, groups, system, comm_cache)
                out.append(InstructionCost(kind, seconds, 0.0, size, op, groups, is_async, outer))
        costs[name] = tuple(out)
    totals: dict[OpKind, list[float]] = {}
    _accumulate(module, module.entry, 1, costs, trips, totals)
    by_kind = {kind: KindTotal(int(v[0]), v[1], v[2], v[3]) for kind, v in sorted(totals.items())}
    return ModuleCost(module, system, costs, trips, by_kind)


def _work(inst: Instruction, module: HloModule, devices: int, comp: Computation
          ) -> Work | tuple[Collective, OpKind, float, tuple[tuple[int, ...], ...], bool] | None:
    if inst.opcode in FREE or inst.opcode in CONTROL:
        return None
    coll = collective_of(inst, module)
    if coll is None:
        if inst.opcode == "async-start":  # an async computation that is no collective: cost it as a call
            return None
        return instruction_work(inst, comp, module)
    op, kind, described = coll
    names = comp.by_name
    operand = float(sum(names[o].shape.bytes for o in inst.operands if o in names))
    groups = source_target_pairs(described) if op is Collective.SEND_RECV else replica_groups(described, devices)
    size = message_bytes(op, inst, operand)
    return op, kind, size, groups, not is_synchronous(inst)


def _executed(module: HloModule, trips: dict[tuple[str, str], int]) -> Iterator[str]:
    """Computations that run as sequences of kernels: the entry and what its control flow calls (not the
    fused computations or reducers, which are parts of one kernel)."""
    seen: set[str] = set()
    stack = [module.entry]
    while stack:
        name = stack.pop()
        if name in seen or name not in module.computations:
            continue
        seen.add(name)
        yield name
        for inst in module.computations[name].instructions:
            if inst.opcode in CONTROL or (inst.opcode == "async-start" and collective_of(inst, module) is None):
                stack.extend(called(inst))
                if inst.opcode == "while":
                    trips[(name, inst.name)] = trip_count(inst, module)


def _kernel_seconds(works: list[Work], system: System) -> np.ndarray:
    """Roofline time of every kernel, one vectorized call per GEMM precision."""
    seconds = np.zeros(len(works))
    if not works:
        return seconds
    flop = np.array([w.flop for w in works])
    moved = np.array([w.bytes for w in works])
    precision = np.array([PRECISION.code(_precision(w)) for w in works])
    fused = np.array([w.kind is OpKind.ATTENTION for w in works])
    for code in np.unique(precision):
        mask = (precision == code) & ~fused
        ops = tuple(Op(f, b) for f, b in zip(flop[mask].tolist(), moved[mask].tolist(), strict=True))
        if ops:
            seconds[mask] = kernel_times(ops, system.device, float(code))
        attention = (precision == code) & fused
        if attention.any():  # cuDNN fused attention: the device's FlashAttention-3 / cuDNN efficiency
            depth = np.array([w.depth for w in works])[attention]
            seconds[attention] = fused_attention_time(Op(flop[attention], moved[attention], depth=depth),
                                                      system.device, float(code), CUDNN_ATTENTION_VERSION)
    return seconds


def _precision(work: Work) -> TrainingPrecision:
    """The GEMM precision of a kernel, from its inputs' element type (f32 runs as TF32 where the device has
    it: `cost/compute.py`); kernels without GEMMs take any (their FLOPs are zero)."""
    if work.precision_dtype.startswith("f8"):
        return TrainingPrecision.FP8
    return _PRECISION.get(work.precision_dtype, TrainingPrecision.FP32 if work.flop else TrainingPrecision.BF16)


def placement_of(group: tuple[int, ...], sizes: tuple[int, ...]) -> Placement:
    """Spans of a group of device ids on the network's dimensions (ids number mixed-radix, innermost first):
    the positions the group takes on each; a group that is no product of its spans is costed as one."""
    ids = np.asarray(group)
    spans: list[float] = []
    block = 1
    for size in sizes:
        spans.append(float(len(np.unique((ids // block) % size))))
        block *= size
    product = float(np.prod(spans))
    if product != len(group) and len(group) > 0:
        outer = max((i for i, s in enumerate(spans) if s > 1), default=0)
        spans[outer] = len(group) / float(np.prod(spans[:outer] + spans[outer + 1:]))
    return Placement(tuple(spans))


def comm_seconds(op: Collective, size: float, groups: tuple[tuple[int, ...], ...], system: System,
                  cache: dict[tuple[Collective, float, tuple[float, ...]], tuple[float, int]]) -> tuple[float, int]:
    """Time of the collective (its slowest group) and the outermost dimension it crosses."""
    worst, outer = 0.0, 0
    for group in groups:
        if len(set(group)) < 2 or size <= 0:
            continue
        placement = placement_of(group, system.sizes)
        key = (op, size, tuple(float(x) for x in placement.spans))
        if key not in cache:
            cost = (send_recv(size, placement, system) if op is Collective.SEND_RECV
                    else collective(op, size, placement, system).cost)
            cache[key] = (float(cost.time), int(placement.outermost))
        seconds, dim = cache[key]
        worst, outer = max(worst, seconds), max(outer, dim)
    return worst, outer


def _accumulate(module: HloModule, name: str, times: int, costs: dict[str, tuple[InstructionCost | None, ...]],
                trips: dict[tuple[str, str], int], totals: dict[OpKind, list[float]]) -> None:
    comp = module.computations[name]
    for inst, cost in zip(comp.instructions, costs[name], strict=True):
        if cost is not None:
            row = totals.setdefault(cost.kind, [0.0, 0.0, 0.0, 0.0])
            row[0] += times
            row[1] += times * cost.seconds
            row[2] += times * cost.flop
            row[3] += times * cost.bytes
        elif inst.opcode == "while":
            n = trips.get((name, inst.name), 1)
            for callee in called(inst):
                if callee in costs:
                    _accumulate(module, callee, times * n, costs, trips, totals)
        elif inst.opcode == "conditional":
            branches = [b for b in called(inst) if b in costs]
            if branches:  # the slowest branch
                slowest = max(branches, key=lambda b: sum(c.seconds for c in costs[b] if c is not None))
                _accumulate(module, slowest, times, costs, trips, totals)
        elif inst.opcode in CONTROL or inst.opcode == "async-start":
            for callee in called(inst):
                if callee in costs:
                    _accumulate(module, callee, times, costs, trips, totals)
