"""A phase per network dimension (docs/formulas.md §1.5; ASTRA-sim's hierarchical collectives, NCCL's Tree
family): all-reduce = reduce-scatter up the dimensions on messages n / inner_i, all-reduce at the top,
all-gather down; reduce-scatter and all-gather one phase per dimension on n / inner_i; broadcast and reduce
on n per dimension; all-to-all all dimensions at once. Sequential: the phases one after another. Pipelined:
T = sum of latencies + max_i B_i + (sum_i B_i - max_i B_i) / k over k = n / chunk chunks (ASTRA-sim 2.0,
Won et al. 2023, §IV; Rashidi et al. 2020, Themis), the phases' (algorithm, protocol) chosen together
(comm/joint_choice.py)."""

from __future__ import annotations

import math
from functools import partial

import numpy as np

from armillary.comm.algorithms import dimension_options
from armillary.comm.composed import Composed, select, shared_base, summed_phases, when
from armillary.comm.cost_types import NOTHING, DimensionCost
from armillary.comm.joint_choice import Stack, fastest_together, frontier, joint, on_mask
from armillary.comm.phase_net import PhaseNet, incast, phase_message
from armillary.memo import IdentityCache
from armillary.numerics import Array, all_true, any_true, is_array, logical_not, nan_maximum
from armillary.specs.communication import (
    ALG_AUTO,
    ALG_RING,
    ALL_GATHER,
    ALL_REDUCE,
    ALL_TO_ALL,
    REDUCE_SCATTER,
    Collective,
)
from armillary.specs.network import CollectiveLibrary, NetworkDimension
from armillary.units import MIB

_NCCL = CollectiveLibrary.NCCL  # read once, as Collective's members are (specs/communication.py says why)
# bytes per pipelined chunk: the order of NCCL's per-step slice over its channels (NCCL_BUFFSIZE 4 MiB
# split in NCCL_STEPS = 8 slots per channel)
PIPELINE_CHUNK_BYTES = MIB


def phases(op: Collective, n: Array, net: PhaseNet, pipelined: bool, index: int) -> Composed:
    """A phase per dimension, pipelined or one after another."""
    if pipelined and op is not ALL_TO_ALL:
        return pipelined_phases(op, n, net, index)
    count, group = len(net.system.network), net.group
    stages: list[list[DimensionCost]] = []
    for i in range(count):
        top, message = net.top(i), phase_message(op, n, group, i)
        if op is ALL_TO_ALL:  # all dimensions at once, the scale-out tier under incast
            stages.append([incast(net, i).phase(i, op, message)])
            continue
        at_top = when(top, partial(net.phase, i, op, message))
        if op is ALL_REDUCE:
            # below the top: reduce-scatter up, all-gather down (ASTRA-sim, Sys.cc generate_all_reduce), not
            # the dimension's all-reduce: a one-shot direct all-reduce would send (p - 1) n, not 2 (p - 1)/p n
            below = [when(logical_not(top), partial(net.phase, i, o, message))
                     for o in (REDUCE_SCATTER, ALL_GATHER)]
            stages.append([select(top, at_top, NOTHING)] + [select(top, NOTHING, b) for b in below])
        else:
            stages.append([select(top, at_top, when(logical_not(top), partial(net.phase, i, op, message)))])
    flat = [s for dim in stages for s in dim]
    dims = tuple(summed_phases(dim) for dim in stages)
    if op is ALL_TO_ALL:
        time = flat[0].time
        for s in flat[1:]:
            time = np.maximum(time, s.time)
        return Composed(time if is_array(time) else float(time), dims, index)
    return Composed(sum(s.time for s in flat) - shared_base(flat), dims, index)




def pipelined_phases(op: Collective, n: Array, net: PhaseNet, index: int) -> Composed:
    """The phases pipelined: T = sum of fixed costs + max_i B_i + (sum_i B_i - max_i B_i) / k, with the
    (algorithm, protocol) of every phase chosen together for the least T, as a library's tuner picks the
    configuration of least modelled time for the whole collective (NCCL tuning.cc, ncclTopoGetAlgoTime per
    algorithm and protocol of the collective). Each phase choosing by its own time is not the same: a phase
    off the slowest dimension pays only 1/k of its bandwidth time, so its own fastest (more latency, less
    transfer) can be the whole's slowest, and a lower latency that flipped its choice made the collective
    slower. The joint choice is exact (`fastest_together`), so a faster resource never slows it.
    NCCL's tree family keeps ring off the top and the dimension's all-reduce below it (its intra-node reduce
    and broadcast, NVLS or chain); the hierarchical library reduce-scatters up and all-gathers down below the
    top (ASTRA-sim, Sys.cc generate_all_reduce: a one-shot direct all-reduce would send (p - 1) n, not
    2 (p - 1)/p n), each of the two phases with its own choice."""
    count, group = len(net.system.network), net.group
    nccl = net.system.collectives is _NCCL
    sweep = is_array(n, *group.spans)
    choices: list[list[tuple[DimensionCost, ...]] | Stack] = []
    for i in range(count):
        top, message = net.top(i), phase_message(op, n, group, i)
        at_top: list[tuple[DimensionCost, ...]] = (
            [(o,) for o in net.options(i, op, message, (ALG_RING,) if nccl else ())] if any_true(top) else [])
        below: list[tuple[DimensionCost, ...]] = []
        if not all_true(top):
            if op is ALL_REDUCE and not nccl:
                scatter = frontier([(o,) for o in net.options(i, REDUCE_SCATTER, message)])
                gather = frontier([(o,) for o in net.options(i, ALL_GATHER, message)])
                below = [r + g for r in scatter for g in gather]
            else:
                below = [(o,) for o in net.options(i, op, message)]
        if sweep:  # the same steps on stacked options (`Stack`): a few numpy calls per dimension, not per option
            choices.append(Stack.on_mask(top, at_top, below, np.shape(n)).frontier())
        else:
            choices.append(frontier(on_mask(top, at_top, below)))
    chunks = np.maximum(np.asarray(n, dtype=float) / PIPELINE_CHUNK_BYTES, 1.0) if sweep else \
        nan_maximum(float(n) / PIPELINE_CHUNK_BYTES, 1.0)
    if sweep:
        stacks = [c for c in choices if isinstance(c, Stack)]
        shape = stacks[0].shape  # (chunks broadcast to it where not of it already: np.broadcast_to costs ~2 us)
        spread = chunks if type(chunks) is np.ndarray and chunks.shape == shape else np.broadcast_to(chunks, shape)
        picked = [st.gather(j) for st, j in zip(stacks, joint(stacks, spread), strict=True)]
    else:
        picked = fastest_together([c for c in choices if isinstance(c, list)], float(chunks))
    flat = [s for dim in picked for s in dim]
    dims = tuple(summed_phases(list(dim)) for dim in picked)
    fixed = sum(s.fixed for s in flat) - shared_base(flat)
    transfers = [d.transfer for d in dims]
    slowest = transfers[0]
    for t in transfers[1:]:
        slowest = nan_maximum(slowest, t)
    total = sum(transfers)
    fill: Array
    if is_array(total, slowest, chunks):
        runs = np.isfinite(total)  # where a phase cannot run, the composition takes forever
        fill = np.where(runs, total - np.where(runs, slowest, 0.0), 0.0) / chunks
    else:
        fill = (total - slowest if math.isfinite(total) else 0.0) / chunks
    time = fixed + slowest + fill
    return Composed(time if is_array(time) else float(time), dims, index)


def never_faster_pipelined(op: Collective, n: Array, net: PhaseNet, first: Composed) -> bool:
    """Whether the pipelined phases are at no point faster than `first` (NCCL's flat ring), so `faster`
    would keep `first` everywhere: where no algorithm but the ring runs `op` on the group's top dimension
    (NCCL's tree family does not reduce-scatter or all-gather without NVLS / CollNet: tuning.cc), the top
    phase is blocked and the pipelined time infinite wherever the group has two ranks or more (at finite
    inputs: finite fixed costs); a group of one runs no phase (pipelined time 0), so `first` is kept there
    where it takes no time."""
    if op is ALL_TO_ALL or net.algorithm is not ALG_AUTO or _SKIP_CHECK_OFF:
        return False
    blocked = [_top_blocked(op, dim, net.system.collectives is _NCCL) for dim in net.system.network]
    if not any(blocked):
        return False
    group, t = net.group, first.time
    if not is_array(t, n, *group.spans, *(b for b in net.bandwidths if b is not None)):
        if not all(math.isfinite(float(x)) for x in (n, *group.spans, *(b for b in net.bandwidths if b is not None))):
            return False
        return (blocked[int(group.outermost)] and not math.isnan(t)) if group.size > 1 else bool(t <= 0)
    if not all(np.count_nonzero(np.isfinite(x)) == np.size(x)
               for x in (n, *group.spans, *(b for b in net.bandwidths if b is not None))):
        return False
    at_top = np.asarray(blocked)[np.asarray(net.outermost, dtype=int)]  # (the net's: `group.outermost`, once)
    kept = np.where(np.asarray(net.size) > 1, at_top & ~np.isnan(t), t <= 0)
    return bool(np.count_nonzero(kept) == kept.size)

_SKIP_CHECK_OFF = False  # tests set it to compare with the pipelined phases always built


def _top_blocked(op: Collective, dim: NetworkDimension, nccl: bool) -> bool:
    """Whether no (algorithm, protocol) can run `op` as the top phase on `dim` (`PhaseNet.options` with NCCL's
    ring left out): which algorithms run depends on the dimension and the collective, not on the sizes."""
    known = _TOP_BLOCKED.get(dim, lambda _: {})
    if (op, nccl) not in known:
        try:
            dimension_options(op, 1e6, 2.0, dim, 1.0, ALG_AUTO, None, (ALG_RING,) if nccl else ())
            known[op, nccl] = False
        except ValueError:
            known[op, nccl] = True
    return known[op, nccl]


# per network dimension (a frozen spec, by identity), `_top_blocked` of each (collective, NCCL or not)
_TOP_BLOCKED: IdentityCache[NetworkDimension, dict[tuple[Collective, bool], bool]] = IdentityCache(1024)

