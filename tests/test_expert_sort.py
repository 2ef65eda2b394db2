"""Megatron-Core's alltoall dispatcher regroups the received tokens by local expert and back ("Permutation 2" /
"Unpermutation 2", `sort_chunks_by_idxs`; token_dispatcher.py core_v0.15.0): `experts_forward` sort_pass, by
hand, and the estimator's choice of it by dispatcher."""

from __future__ import annotations

import pytest

from armillary import Strategy, Training, estimate
from armillary.plan.arrays import ModelArrays
from armillary.specs.loading import load_model, load_system
from armillary.workload.experts import experts_forward

QWEN = ModelArrays.of(load_model("qwen3-30b-a3b"))  # hidden 2048, 128 experts, top 8


def test_the_sort_copies_the_received_tokens_with_their_probabilities_and_the_outputs_back():
    # 4096 tokens on a rank of EP 8 (16 local experts), balanced: 4096 x 8 = 32,768 received copies of width
    # 2048 at 2 bytes; the sort reads and writes them (2 N h e) and their fp32 probabilities (8 N), the unsort
    # reads and writes the expert outputs (2 N h e)
    plain = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0)
    sorted_ = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, bias_pass=1.0, sort_pass=1.0)
    assert float(sorted_.permute.bytes - plain.permute.bytes) == pytest.approx(32768 * (4 * 2048 * 2 + 8))
    assert float(sorted_.permute.flop) == float(plain.permute.flop) == 0.0
    assert sorted_.experts_in == plain.experts_in and sorted_.activation == plain.activation


def test_one_local_expert_needs_no_sort():
    # EP 128: one expert a rank, nothing to regroup (`if self.num_local_experts > 1`)
    plain = experts_forward(QWEN, 4096.0, 128.0, 1.0, 1.0, 2.0, 2.0)
    assert experts_forward(QWEN, 4096.0, 128.0, 1.0, 1.0, 2.0, 2.0, sort_pass=1.0) == plain


def test_expert_tensor_parallelism_sorts_the_gathered_tokens():
    # the sort follows the gather over the expert-TP ranks: etp 2 sorts twice the rows
    one = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0, sort_pass=1.0)
    two = experts_forward(QWEN, 4096.0, 8.0, 2.0, 1.0, 2.0, 2.0, sort_pass=1.0)
    one_plain = experts_forward(QWEN, 4096.0, 8.0, 1.0, 1.0, 2.0, 2.0)
    two_plain = experts_forward(QWEN, 4096.0, 8.0, 2.0, 1.0, 2.0, 2.0)
    assert float(one.permute.bytes - one_plain.permute.bytes) == pytest.approx(32768 * (4 * 2048 * 2 + 8))
    assert float(two.permute.bytes - two_plain.permute.bytes) == pytest.approx(65536 * (4 * 2048 * 2 + 8))


def test_the_alltoall_dispatcher_pays_the_sort_and_the_flex_dispatcher_does_not():
    """Qwen3-30B-A3B on 8 H100s at EP 8 in bf16: the alltoall dispatcher's MoE layer streams the sort's bytes
    more in its forward than the same layer under the deduplicating (flex) dispatcher, exactly; everything
    else in that pass is the same."""
    system, w = load_system("dgx-h100", 8), Training(seq_len=4096, global_batch=64)
    base = Strategy(ep=8, micro_batch=1, recompute="none", precision="bf16")
    alltoall = estimate("qwen3-30b-a3b", system, base, w)
    flex = estimate("qwen3-30b-a3b", system, base.model_copy(
        update={"routing": base.routing.model_copy(update={"dispatch_dedup": True})}), w)
    assert alltoall.moe_layer is not None and flex.moe_layer is not None
    received = 4096 * 8  # one micro-batch's tokens x top 8, balanced over EP 8
    sort_bytes = received * (4 * 2048 * 2 + 8)
    assert float(alltoall.moe_layer.forward.bytes - flex.moe_layer.forward.bytes) == pytest.approx(sort_bytes)
    assert float(alltoall.moe_layer.forward.time_s) > float(flex.moe_layer.forward.time_s)
