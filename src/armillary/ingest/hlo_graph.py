"""The task graph of a costed HLO module: one task per kernel and collective, per simulated replica, with
dependencies from the HLO data flow (ParaGraph's construction: Isaev et al., ICPP'22, §3).

Control flow is unrolled: a while loop's body once per iteration (its trip count), a call in place, a
conditional as its slowest branch. A loop too long to unroll (trip count x one iteration's instructions over
`unroll_limit`, hlo_cost.UNROLL_LIMIT by default) is symbolic: its first WARMUP_TRIPS iterations are unrolled
in place, the rest are one repeated block per rank, (trips - WARMUP_TRIPS) x the loop's period: the makespan
of WARMUP_TRIPS + 1 iterations simulated alone less that of WARMUP_TRIPS (the steady-state iteration, its
overlap across iterations included). Where the iterations run back to back this equals the unrolled
simulation to the nanosecond (tests/test_ingest_hlo_loops.py).

Synchronous collectives run on the compute stream (XLA issues them in program order with the kernels); an
async `-start` runs on a communication stream and its `-done` is where its users wait, so it overlaps the
kernels scheduled between the two. An SPMD program is the same on every partition: by default one rank stands
for all of them (`rank_weights`); `replicas` simulates that many partitions, each collective joining the
simulated members of each of its groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from armillary.errors import SpecError
from armillary.ingest.hlo_attrs import called, loop_parts
from armillary.ingest.hlo_cost import (
    UNROLL_LIMIT,
    WARMUP_TRIPS,
    InstructionCost,
    ModuleCost,
    executed_counts,
    symbolic,
)
from armillary.ingest.hlo_parse import Instruction
from armillary.ingest.hlo_work import OpKind
from armillary.simulate.engine import run
from armillary.simulate.graph import Category, GraphBuilder, Stream, TaskGraph, TaskKind, Tier
from armillary.specs.communication import Collective

MAX_TASKS = 5_000_000
MAX_LOOP_NS = 2**62  # a symbolic loop's repeated block, in the engine's int64 nanoseconds
Value = tuple[frozenset[int], ...]  # producer steps of each top-level tuple element (one element: an array)
_ASYNC_STREAM = {Collective.ALL_GATHER: Stream.DP_GATHER, Collective.ALL_TO_ALL: Stream.EP,
                 Collective.SEND_RECV: Stream.PP}


@dataclass(frozen=True)
class HloGraph:
    graph: TaskGraph
    kinds: tuple[OpKind, ...]  # the op kind of every task (a repeated block: the kind it spends most time in)
    # repeated blocks of symbolic loops: task -> seconds of each op kind it stands for
    repeats: dict[int, tuple[tuple[OpKind, float], ...]]


@dataclass(frozen=True)
class _Period:
    """A loop's steady-state iteration, simulated alone: its makespan and rank 0's busy seconds per kind."""

    ns: int
    busy: tuple[tuple[OpKind, float], ...]
    flop: float


@dataclass
class _State:
    cost: ModuleCost
    ranks: int
    builder: GraphBuilder
    steps: list[tuple[int, ...]]  # step -> its task on each simulated rank (a collective: the same task)
    kinds: list[OpKind]
    unroll_limit: float
    counts: dict[str, int]  # instructions of one execution of each computation (as its graph is built)
    periods: dict[tuple[str, str], _Period]  # (condition, body) -> its period, shared with nested states
    repeats: dict[int, tuple[tuple[OpKind, float], ...]]


def hlo_graph(cost: ModuleCost, replicas: int = 1, unroll_limit: float = UNROLL_LIMIT) -> HloGraph:
    """The task graph of one execution of the entry computation on `replicas` simulated partitions; loops of
    more than `unroll_limit` instructions unrolled are symbolic (0: every loop of over SYMBOLIC_TRIPS
    iterations; inf: none)."""
    devices = cost.module.num_partitions * cost.module.replica_count
    if not 1 <= replicas <= devices:
        raise SpecError(f"--replicas must be between 1 and the module's {devices} partitions, not {replicas}")
    if not unroll_limit >= 0:
        raise SpecError(f"unroll_limit: expected a number of instructions >= 0 (inf: unroll every loop), "
                        f"not {unroll_limit}")
    state = _State(cost, replicas, GraphBuilder(), [], [], unroll_limit,
                   executed_counts(cost.module, cost.trips, unroll_limit), {}, {})
    entry = cost.module.entry_computation
    params: tuple[Value, ...] = tuple((frozenset(),) for i in entry.instructions if i.opcode == "parameter")
    _run(state, cost.module.entry, params)
    weight = devices // replicas if devices % replicas == 0 else 1
    labels = tuple(f"partition {r}" for r in range(replicas))
    return HloGraph(state.builder.graph(replicas, labels, (weight,) * replicas), tuple(state.kinds), state.repeats)


def _run(state: _State, name: str, args: tuple[Value, ...]) -> Value:
    """Emit the tasks of one execution of computation `name` given its parameters' producers; returns the
    root's producers."""
    comp = state.cost.module.computations[name]
    costs = state.cost.costs[name]
    env: dict[str, Value] = {}
    for inst, cost in zip(comp.instructions, costs, strict=True):
        operands = [env.get(o, (frozenset(),)) for o in inst.operands]
        env[inst.name] = _value(state, name, inst, cost, operands, args)
    return env[comp.root.name]


def _value(state: _State, comp: str, inst: Instruction, cost: InstructionCost | None, operands: list[Value],
           args: tuple[Value, ...]) -> Value:
    op = inst.opcode
    if cost is not None:
        return (frozenset((_emit(state, inst, cost, _union(operands)),)),)
    if op == "parameter":
        number = int(inst.argument.strip() or 0)
        return args[number] if number < len(args) else (frozenset(),)
    if op == "get-tuple-element" and operands:
        index = int(inst.attributes.split("index=")[1].split(",")[0]) if "index=" in inst.attributes else 0
        whole = operands[0]
        return (whole[index],) if index < len(whole) else (_union([whole]),)
    if op == "tuple":
        return tuple(_union([v]) for v in operands)
    if op == "while":
        return _loop(state, comp, inst, operands)
    if op == "conditional":
        return _branch(state, inst, operands)
    if op in ("call", "async-start"):
        callee = next((c for c in called(inst) if c in state.cost.costs), None)
        return _run(state, callee, tuple(operands)) if callee else (_union(operands),)
    return (_union(operands),)  # views and the -done of async pairs: wait on what they name


def _loop(state: _State, comp: str, inst: Instruction, operands: list[Value]) -> Value:
    condition, body = loop_parts(inst)
    start = operands[0] if operands else (frozenset(),)
    trips = state.cost.trips.get((comp, inst.name), 1)
    iteration = state.counts.get(condition, 0) + state.counts.get(body, 0)
    if not symbolic(trips, iteration, state.unroll_limit):
        return _iterate(state, condition, body, start, trips)
    value = _iterate(state, condition, body, start, WARMUP_TRIPS)
    period = _period(state, condition, body)
    rest = trips - WARMUP_TRIPS
    if rest * period.ns > MAX_LOOP_NS:
        raise SpecError(f"HLO while loop {inst.name[:60]!r}: {trips:,} iterations of {period.ns:,} ns take past "
                        f"the simulator's clock (at most {MAX_LOOP_NS:.3g} ns, 146 years)")
    deps = _union([value])
    per_rank = tuple(state.builder.add(f"{inst.name} x{rest}", TaskKind.COMPUTE, Category.COMPUTE, (r,),
                                       Stream.COMPUTE, rest * period.ns / 1e9, [state.steps[d][r] for d in deps],
                                       flop=rest * period.flop) for r in range(state.ranks))
    busy = tuple((kind, rest * seconds) for kind, seconds in period.busy)
    main = max(busy, key=lambda kv: kv[1])[0] if busy else OpKind.FUSION
    for task in per_rank:
        state.kinds.append(main)
        state.repeats[task] = busy
    state.steps.append(per_rank)
    block = frozenset((len(state.steps) - 1,))
    # what the loop leaves as it found it keeps its producers; the rest waits for the repeated block
    return tuple(v if i < len(start) and v == start[i] else block for i, v in enumerate(value))


def _iterate(state: _State, condition: str, body: str, value: Value, trips: int) -> Value:
    for _ in range(trips):
        if condition in state.cost.costs:
            _run(state, condition, (value,))
        value = _run(state, body, (value,))
    return value


def _period(state: _State, condition: str, body: str) -> _Period:
    """The loop's steady-state iteration: WARMUP_TRIPS + 1 iterations simulated alone, less WARMUP_TRIPS."""
    if (condition, body) in state.periods:
        return state.periods[(condition, body)]
    makespans: list[int] = []
    last: _State | None = None
    for trips in (WARMUP_TRIPS, WARMUP_TRIPS + 1):
        alone = _State(state.cost, state.ranks, GraphBuilder(), [], [], state.unroll_limit, state.counts,
                       state.periods, {})
        _iterate(alone, condition, body, (frozenset(),), trips)
        makespans.append(run(alone.builder.graph(state.ranks)).makespan_ns if alone.builder.tasks else 0)
        last = alone
    assert last is not None
    busy: dict[OpKind, float] = {}
    flop = 0.0
    # rank 0's tasks of the last iteration (the same count per iteration: the tasks after WARMUP_TRIPS')
    per_iteration = len(last.builder.tasks) // (WARMUP_TRIPS + 1)
    first = len(last.builder.tasks) - per_iteration
    for index in range(first, len(last.builder.tasks)):
        task = last.builder.tasks[index]
        if task.ranks[0] != 0:
            continue
        for kind, seconds in last.repeats.get(index, ((last.kinds[index], task.duration_ns / 1e9),)):
            busy[kind] = busy.get(kind, 0.0) + seconds
        flop += task.flop
    period = _Period(max(makespans[1] - makespans[0], 0), tuple(sorted(busy.items())), flop)
    state.periods[(condition, body)] = period
    return period


def _branch(state: _State, inst: Instruction, operands: list[Value]) -> Value:
    branches = [c for c in called(inst) if c in state.cost.costs]
    if not branches:
        return (_union(operands),)
    slowest = max(branches, key=lambda b: sum(c.seconds for c in state.cost.costs[b] if c is not None))
    index = called(inst).index(slowest)
    return _run(state, slowest, (operands[index + 1] if index + 1 < len(operands) else (_union(operands),),))


def _union(values: list[Value]) -> frozenset[int]:
    out: frozenset[int] = frozenset()
    for v in values:
        for part in v:
            out = out | part if out else part
    return out


def _emit(state: _State, inst: Instruction, cost: InstructionCost, deps: frozenset[int]) -> int:
    b = state.builder
    if len(b.tasks) > MAX_TASKS:
        raise SpecError(f"the unrolled HLO program has more than {MAX_TASKS:,} tasks: simulate fewer --replicas "
                        "or unroll fewer loops (a lower unroll_limit)")
    per_rank: list[int] = []
    if cost.collective is None:
        for r in range(state.ranks):
            per_rank.append(b.add(inst.name, TaskKind.COMPUTE, Category.COMPUTE, (r,), Stream.COMPUTE,
                                  cost.seconds, [state.steps[d][r] for d in deps], flop=cost.flop,
                                  bytes=cost.bytes))
            state.kinds.append(cost.kind)
    else:
        per_rank = _collective(state, inst, cost, deps)
    state.steps.append(tuple(per_rank))
    return len(state.steps) - 1


def _collective(state: _State, inst: Instruction, cost: InstructionCost, deps: frozenset[int]) -> list[int]:
    op = cost.collective
    assert op is not None
    category = (Category.PP if op is Collective.SEND_RECV else Category.EP if op is Collective.ALL_TO_ALL
                else Category.TP if cost.outermost == 0 else Category.DP)
    stream = (_ASYNC_STREAM.get(op, Stream.TP if cost.outermost == 0 else Stream.DP) if cost.asynchronous
              else Stream.COMPUTE)
    tier = Tier.SCALE_UP if cost.outermost == 0 else Tier.SCALE_OUT
    groups = [tuple(sorted(set(g))) for g in cost.groups] or [tuple(range(state.ranks))]
    if op is Collective.SEND_RECV:  # a rank's sends and receives run as one exchange of its message
        groups = [(r,) for r in range(state.ranks)]
    per_rank = [-1] * state.ranks
    for group in groups:
        members = tuple(r for r in group if r < state.ranks)
        if not members:
            continue
        if state.ranks == 1:
            members = (0,)
        task = state.builder.add(inst.name, TaskKind.COLLECTIVE, category, members, stream, cost.seconds,
                                 sorted({state.steps[d][r] for d in deps for r in members}), tier, cost.bytes,
                                 group=f"{op.value} x{len(group)}", collective=op)
        state.kinds.append(cost.kind)
        for r in members:
            per_rank[r] = task
        if state.ranks == 1:
            break
    for r in range(state.ranks):  # a rank in no group (a permute that skips it) waits only on its inputs
        if per_rank[r] < 0:
            per_rank[r] = state.builder.add(inst.name, TaskKind.COMPUTE, category, (r,), stream, 0.0,
                                            [state.steps[d][r] for d in deps])
            state.kinds.append(cost.kind)
    return per_rank
