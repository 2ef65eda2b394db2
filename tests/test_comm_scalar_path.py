"""One configuration's fast paths (issue 47) compute what the array path computes, bit for bit: the collectives'
plain-float path (comm/), send_recv, the quantize table and one layer's kernels (workload/). Each test costs
points alone and as one sweep, or checks a hand value."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import gpt

from armillary.comm.algorithms import NOTHING, dimension_cost
from armillary.comm.collectives import collective, send_recv
from armillary.comm.fastest_candidate import fastest
from armillary.comm.one_dimension import on_one_dimension
from armillary.comm.phase_net import PhaseNet, phase_message
from armillary.plan.arrays import ModelArrays
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.workload.attention import cache_read_bytes, fused_attention_op, kv_cache_elements_per_rank
from armillary.workload.quantize import _BYTES, _PASSES, LAYOUTS, SOURCE_BYTES, format_bytes, quantize_bytes
from armillary.workload.transformer import layer_forward

SIZES = (1.0, 3e3, 2.5e5, 6e6, 1.3e8, 4e9)


def test_the_fastest_candidate_is_the_first_of_the_least_time():
    """`fastest` picks the first of equal least times, and never a NaN over a number after it (what min over
    the indices keyed by time picks)."""
    labels = [(0, 0), (0, 1), (0, 2), (1, 2)]
    for times, first in (([3.0, 1.0, 1.0, 2.0], 1), ([math.nan, 2.0, 1.0, 1.0], 0), ([2.0, math.nan, 1.0, 5.0], 2),
                         ([0.0, -0.0, 1.0, 1.0], 0), ([math.inf, math.inf, math.inf, math.inf], 0)):
        sents, fixeds = [10.0 + i for i in range(4)], [20.0 + i for i in range(4)]
        chosen = fastest(times, sents, fixeds, labels, 2.0, True)
        expected = min(range(len(times)), key=times.__getitem__)
        assert expected == first
        assert (chosen.sent_bytes, chosen.fixed, (chosen.algorithm, chosen.protocol)) == (
            sents[first], fixeds[first], labels[first])


@pytest.mark.parametrize("name", ["dgx-a100", "gb200-nvl72", "trn2-16", "mi300x-8", "tpu-v5p-slice"])
@pytest.mark.parametrize("op", [Collective.ALL_REDUCE, Collective.REDUCE_SCATTER, Collective.ALL_GATHER,
                                Collective.ALL_TO_ALL, Collective.BROADCAST])
def test_a_group_inside_one_dimension_alone_is_its_point_of_a_sweep(name, op):
    """Groups inside one dimension (one configuration: plain floats through `on_one_dimension`'s loop) against
    the same groups and sizes as one sweep, every field bit for bit."""
    system = load_system(name, 64)
    sizes = [d.size for d in system.network]
    groups = [tuple(float(k) if j == i else 1.0 for j in range(len(sizes))) for i, k in enumerate(sizes) if k > 1]
    groups += [tuple(2.0 if j == i else 1.0 for j in range(len(sizes))) for i in range(len(sizes))]
    swept = Placement(tuple(np.array([g[i] for g in groups])[None, :] for i in range(len(sizes))))
    sweep = collective(op, np.array(SIZES)[:, None], swept, system)
    for a, n in enumerate(SIZES):
        for b, g in enumerate(groups):
            alone = collective(op, n, Placement(g), system)
            assert type(alone.cost.time) is float
            assert alone.cost.time == np.broadcast_to(sweep.cost.time, (len(SIZES), len(groups)))[a, b]
            assert alone.cost.scale_up_bytes == np.broadcast_to(sweep.cost.scale_up_bytes,
                                                                (len(SIZES), len(groups)))[a, b]
            assert alone.cost.scale_out_bytes == np.broadcast_to(sweep.cost.scale_out_bytes,
                                                                 (len(SIZES), len(groups)))[a, b]
            assert int(alone.composition) == np.broadcast_to(sweep.composition, (len(SIZES), len(groups)))[a, b]
            for span, d_alone, d_sweep in zip(g, alone.dimensions, sweep.dimensions, strict=True):
                # (what an idle dimension "chose" is no cost: a sweep labels it by its other points' choice)
                for field in ("time", "sent_bytes", "fixed", *(("algorithm", "protocol") if span > 1 else ())):
                    point = np.broadcast_to(getattr(d_sweep, field), (len(SIZES), len(groups)))[a, b]
                    assert getattr(d_alone, field) == point, (g, n, field)


def test_a_dimension_the_group_does_not_span_is_nothing_as_its_phase_gives_it():
    """`on_one_dimension` skips the phase of a dimension one configuration's group does not span; the phase
    itself gives NOTHING there, and the spanned dimension's phase is dimension_cost of its message."""
    system = load_system("dgx-a100", 64)
    group = Placement((8.0, 1.0))
    net = PhaseNet(system, group, Algorithm.AUTO, (None, None))
    composed = on_one_dimension(Collective.ALL_GATHER, 5e7, net)
    assert composed.dimensions[1] is NOTHING
    assert net.phase(1, Collective.ALL_GATHER, phase_message(Collective.ALL_GATHER, 5e7, group, 1)) is NOTHING
    own = dimension_cost(Collective.ALL_GATHER, 5e7, 8.0, system.network[0], system.device.hbm.rate)  # n / inner_0 = n
    assert composed.dimensions[0] == own
    assert composed.time == own.time
    # NCCL runs a ring inside the node for 50 MB: the flat ring composition, as a 0-d array (what np.where gives)
    assert isinstance(composed.composition, np.ndarray) and composed.composition.shape == ()


@pytest.mark.parametrize("name", ["dgx-a100", "gb200-nvl72", "trn2-16"])
def test_send_recv_alone_is_its_point_of_a_sweep(name):
    """send_recv on each dimension (plain floats) against a sweep over the groups' outermost dimension."""
    system = load_system(name, 64)
    count = len(system.network)
    groups = [tuple(2.0 if j == i else 1.0 for j in range(count)) for i in range(count)]
    swept = Placement(tuple(np.array([g[i] for g in groups])[None, :] for i in range(count)))
    sweep = send_recv(np.array(SIZES)[:, None], swept, system)
    for a, n in enumerate(SIZES):
        for b, g in enumerate(groups):
            alone = send_recv(n, Placement(g), system)
            for field in ("time", "scale_up_bytes", "scale_out_bytes"):
                assert getattr(alone, field) == np.broadcast_to(getattr(sweep, field), (len(SIZES), count))[a, b]


def test_quantize_bytes_of_one_code_is_the_sweep_s_and_the_hand_count():
    """The per-code table of floats against the array path and read SOURCE_BYTES x passes + LAYOUTS x bytes."""
    codes = np.arange(len(_BYTES), dtype=float)
    swept = quantize_bytes(1e6, codes)
    for code in range(len(_BYTES)):
        alone = quantize_bytes(1e6, float(code))
        assert type(alone) is float and alone == swept[code]
        assert alone == 1e6 * (float(_PASSES[code]) * SOURCE_BYTES + LAYOUTS * float(_BYTES[code]))
        assert format_bytes(float(code)) == format_bytes(codes)[code] == float(_BYTES[code])
    assert quantize_bytes(1e6, 0.0) == 0.0  # no block format, no traffic


def test_one_layer_alone_is_its_point_of_a_sweep():
    """layer_forward of one configuration (floats) against a sweep over tp, sequence parallelism, context
    parallelism and batch: every op's FLOPs, bytes, group, kernels and depth bit for bit."""
    m = ModelArrays.of(gpt(24, 2048, 16, kv_heads=4))
    points = [(b, t, sp, cp) for b in (1.0, 4.0) for t in (1.0, 2.0, 8.0) for sp in (0.0, 1.0) for cp in (1.0, 2.0)]
    b, t, sp, cp = (np.array([p[i] for p in points]) for i in range(4))
    sweep = layer_forward(m, b, 4096.0, t, sp, 2.0, cp)
    for k, point in enumerate(points):
        alone = layer_forward(m, point[0], 4096.0, point[1], point[2], 2.0, point[3])
        for name in ("qkv", "attention_scores", "attention_over_v", "out_proj", "mlp_in", "mlp_out", "norms",
                     "residuals", "softmax", "activation", "rotary", "flash_attention", "recurrence", "quantize"):
            for field in ("flop", "bytes", "group", "kernels", "depth"):
                swept = np.broadcast_to(getattr(getattr(sweep, name), field), (len(points),))[k]
                assert getattr(getattr(alone, name), field) == swept, (point, name, field)
        for i in range(2):
            assert alone.gemm_inputs[i] == np.broadcast_to(sweep.gemm_inputs[i], (len(points),))[k]
            assert alone.gemm_outputs[i] == np.broadcast_to(sweep.gemm_outputs[i], (len(points),))[k]


def test_the_fused_attention_op_reads_and_writes_the_cache_by_hand():
    """Decode over a KV cache: the op's bytes are Q, O and the new K, V at e bytes, plus the cache read
    (`cache_read_bytes`) and the new keys' entries written, each kv_cache_elements_per_rank per token."""
    m = ModelArrays.of(gpt(24, 2048, 16, kv_heads=4))
    b, queries, keys, past, t, e, cache = 8.0, 1.0, 1001.0, 1000.0, 2.0, 2.0, 1.0
    op = fused_attention_op(m, b, queries, keys, t, e, past=past, cache_bytes=cache)
    per_rank = 2 * 4 * 128 / 2  # K and V of 4 KV heads of 128, over 2 ranks
    assert kv_cache_elements_per_rank(m, t) == per_rank
    assert cache_read_bytes(m, t, past, cache) == past * per_rank * cache
    q_and_o = b * queries * 16 * (128 + 128) / t * e
    new_kv = b * (keys - past) * 2 * 4 * 128 / t * e
    cache_traffic = b * (past * per_rank * cache + (keys - past) * per_rank * cache)
    assert op.bytes == pytest.approx(q_and_o + new_kv + cache_traffic, rel=1e-15)
