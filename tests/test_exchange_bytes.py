"""The simulator's TP / CP / EP exchange tasks carry their bytes (what a Chakra export writes as comm_size):
calls per pass x message bytes, by hand."""

from __future__ import annotations

import armillary
from armillary.estimate.result import ParallelDimension
from armillary.simulate.graph import Category
from armillary.specs.communication import Collective
from armillary.specs.workload import Training

W = Training(seq_len=2048, global_batch=8)


def _bytes(graph, category: Category, prefix: str) -> set[float]:
    return {t.bytes for t in graph.tasks if t.category is category and t.name.startswith(prefix)}


def test_tensor_parallel_all_reduces_without_sp():
    # llama3-8b, tp 2 without SP: 2 all-reduces of b s h x 2 bytes per forward and per backward
    # (Shoeybi et al. 2019 §3: f and g operators); 1 x 2048 x 4096 x 2 = 16 MiB each
    g = armillary.simulate("llama3-8b", "dgx-h100", {"tp": 2, "attention": "flash"}, W, gpus=2,
                           symmetric=False).graph
    msg = 2048 * 4096 * 2
    assert _bytes(g, Category.TP, "tp layer") == {2 * msg}
    assert _bytes(g, Category.TP, "tp backward") == {2 * msg}
    assert {t.collective for t in g.tasks if t.category is Category.TP} == {Collective.ALL_REDUCE}


def test_ulysses_context_parallel_all_to_alls():
    # cp 2 all-to-all (Ulysses; a ring hides behind attention and leaves no task): per pass one all-to-all of
    # the local Q, K, V in ((32 + 2 x 8) heads x 128 x 1024 tokens x 2 bytes) and one of the output
    # (32 x 128 x 1024 x 2)
    g = armillary.simulate("llama3-8b", "dgx-h100", {"cp": 2, "cp_comm": "all_to_all", "attention": "flash"}, W,
                           gpus=2, symmetric=False).graph
    both = (32 + 16) * 128 * 1024 * 2 + 32 * 128 * 1024 * 2
    assert _bytes(g, Category.CP, "cp layer") == {both}
    assert _bytes(g, Category.CP, "cp backward") == {both}
    assert {t.collective for t in g.tasks if t.category is Category.CP} == {Collective.ALL_TO_ALL}


def test_expert_exchange_is_dispatch_plus_combine():
    run = ("mixtral-8x7b", "dgx-h100", {"ep": 8, "attention": "flash", "zero": 1}, Training(seq_len=1024,
                                                                                           global_batch=8))
    est = armillary.estimate(*run, gpus=8)
    a2a = [float(c.message_bytes) for c in est.communication if c.dimension is ParallelDimension.EP]
    g = armillary.simulate(*run, gpus=8, symmetric=False).graph
    assert len(a2a) == 2 and _bytes(g, Category.EP, "ep layer") == {sum(a2a)}
    assert _bytes(g, Category.EP, "ep backward") == {sum(a2a)}


def test_data_parallel_buckets_carry_their_own_operation_bytes():
    # llama3-8b, tp 2, pp 2, ZeRO-1 on 8 devices. The last stage: 16 layers of 218,103,808 weights + 8,192 norm
    # weights, the LM head (128,256 x 4,096) and the final norm (4,096): 4,015,132,672 weights; per tp rank
    # and layer bucket 4,015,132,672 / 2 / 16 = 125,472,896. The reduce-scatter moves fp32 gradients (4 B),
    # the all-gather bf16 parameters (2 B) (Megatron distributed optimizer)
    g = armillary.simulate("llama3-8b", "dgx-h100", {"tp": 2, "pp": 2, "zero": 1, "attention": "flash"}, W,
                           gpus=8, symmetric=False).graph
    bucket = 4_015_132_672 // 2 // 16
    dp = [t for t in g.tasks if t.category is Category.DP]
    assert {t.bytes for t in dp if t.collective is Collective.REDUCE_SCATTER} == {4 * bucket}
    assert {t.bytes for t in dp if t.collective is Collective.ALL_GATHER} == {2 * bucket}
