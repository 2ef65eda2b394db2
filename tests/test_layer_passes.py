"""A sweep's layer kernels keep each value on its own inputs' axes (`cost.compute.kernel_seconds`), and the TP
overlap of one method at every point takes only that method's formula: the values are those of the stacked,
broadcast evaluation (`kernel_times`) and of the estimate of each point alone, to the bit."""

from __future__ import annotations

import numpy as np

from armillary.cost.compute import kernel_seconds, kernel_times
from armillary.estimate.run import estimate_training_run
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload
from armillary.workload.ops import gemm, stream


def test_kernel_seconds_keep_each_ops_shape_and_the_stacked_values() -> None:
    device = load_system("dgx-a100", 8).device
    tokens = np.array([512.0, 2048.0, 8192.0]).reshape(3, 1)  # one axis
    shards = np.array([1.0, 4.0]).reshape(2, 1, 1)  # another, in front of it
    ops = (gemm(tokens, 12288.0, 12288.0, 1.0, 2.0), stream(2 * tokens * 12288.0 / shards),
           gemm(tokens, 4 * 12288.0, 12288.0, 1.0, 2.0), stream(0.0 * tokens), stream(3e6))
    for sixteen_bit in (False, True):
        each = kernel_seconds(ops, device, 0.0, sixteen_bit)
        stacked = kernel_times(ops, device, 0.0, sixteen_bit)
        assert [np.shape(t) for t in each] == [(3, 1), (2, 3, 1), (3, 1), (3, 1), ()]
        for one, row in zip(each, stacked, strict=True):
            assert np.broadcast_to(one, row.shape).tobytes() == row.tobytes()
    assert np.all(np.diff(each[0], axis=0) > 0)  # more tokens, a longer GEMM
    assert np.all(each[3] == 0.0)  # no work: no kernel


def test_tp_overlap_methods_each_point_as_alone() -> None:
    m, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    w = load_workload({"seq_len": 2048, "global_batch": 64})
    exposed = {}
    for method in ("ring", "userbuffers"):
        st = load_strategy({"tp": 8, "pp": 8, "dp": 1, "micro_batch": 1, "attention": "flash",
                            "sequence_parallel": True, "overlap": {"tp_comm": True, "tp_comm_method": method}})
        r = estimate_training_run(m, system, st, w)
        assert float(r.layer.tp_forward_s) >= 0.0 and float(r.layer.tp_backward_s) >= 0.0
        assert np.isfinite(r.step_time_s)
        exposed[method] = float(r.layer.tp_forward_s)
    assert exposed["ring"] != exposed["userbuffers"]  # each method its own formula, not the other's


def test_a_collective_no_point_uses_is_not_composed_and_gives_needed_zeros() -> None:
    from armillary.comm.collectives import all_gather, needed, send_recv
    from armillary.plan.placement import Placement

    system = load_system("dgx-a100", 64)
    group = Placement((np.array([1.0, 8.0, 8.0]), np.array([1.0, 1.0, 4.0])))  # 1, 8 and 32 ranks
    n = np.array([1e3, 1e6, 1e9]).reshape(3, 1)

    def never() -> None:
        raise AssertionError("composed where no point uses it")

    for make in (lambda: send_recv(n, group, system), lambda: all_gather(n, group, system)):
        unused = np.zeros((2, 1, 1), bool)
        zero, composed = needed(never, unused), make() * np.where(unused, 1.0, 0.0)  # type: ignore[arg-type]
        for mine, theirs in zip((zero.time, zero.scale_up_bytes, zero.scale_out_bytes),
                                (composed.time, composed.scale_up_bytes, composed.scale_out_bytes), strict=True):
            shape = np.broadcast_shapes(np.shape(mine), np.shape(theirs))
            assert np.broadcast_to(mine, shape).tobytes() == np.broadcast_to(theirs, shape).tobytes()
        used = np.array([True, False]).reshape(2, 1, 1)  # some points use it: composed, zero elsewhere
        some = needed(make, used)
        assert np.array_equal(some.time[0], make().time) and np.all(some.time[1] == 0)
        assert np.all(some.time[0][:, 1:] > 0)  # 8 and 32 ranks: a cost


def test_attention_core_passes_of_each_kernel_choice() -> None:
    """FlashAttention's backward re-runs the scores: 2.5x the forward FLOPs (FA2 §4.1); separate GEMMs twice the
    forward's (input and weight gradients of each), the softmax's backward 1.5x its traffic."""
    m, system = load_model("llama3-8b"), load_system("dgx-h100", 8)
    w = load_workload({"seq_len": 4096, "global_batch": 64})
    core = {}
    for attention in ("standard", "flash"):
        st = load_strategy({"tp": 1, "pp": 1, "dp": 8, "micro_batch": 1, "attention": attention})
        layer = estimate_training_run(m, system, st, w).layer
        f, b = layer.attention_core, layer.attention_core_backward
        core[attention] = float(f.flop), float(b.flop)
    assert core["flash"][1] == 2.5 * core["flash"][0]
    assert core["standard"][1] == 2 * core["standard"][0]
    # causal FlashAttention skips the masked half of the scores the separate GEMMs compute in full
    assert core["flash"][0] < core["standard"][0]
