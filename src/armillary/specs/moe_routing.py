"""How a training run's tokens reach its experts (docs/formulas.md §7; docs/moe.md): routing imbalance,
capacity, dispatch, redundant experts, and the host side of an MoE layer."""

from __future__ import annotations

from typing import Self

from pydantic import Field, NonNegativeInt, model_validator

from armillary.specs.base import Spec
from armillary.specs.quantity import Seconds


class Routing(Spec):
    """How tokens reach the experts in a training run (docs/formulas.md §7)."""

    imbalance: float = Field(1.0, ge=1, description="busiest expert's load over the mean; 1 = balanced "
                             "(force-balanced benchmarks)")
    capacity_factor: float | None = Field(None, gt=0, description="expert capacity in multiples of the mean "
                                          "load; tokens beyond it are dropped (Fedus et al. 2022 Eq. 3); "
                                          "None = dropless")
    pad_to_capacity: bool = Field(False, description="every expert computes its full capacity (padding)")
    dispatch_fp8: bool = Field(False, description="dispatched tokens travel in fp8 (DeepSeek-V3 §3.3.3)")
    dispatch_dedup: bool = Field(
        False, description="dispatch sends a token once to each node that holds some of its experts, over the "
        "scale-out network to the same-position device there, which forwards it once to each device of the "
        "node holding them, both at once; combine the reverse (DeepEP normal kernels, Megatron-Core's flex "
        "dispatcher with DeepEP or HybridEP); False: one copy per routed expert through an all-to-all "
        "(Megatron's alltoall dispatcher)")
    redundant_experts: NonNegativeInt = Field(
        0, description="extra expert replicas each EP rank holds beside its experts / ep, given to the hottest "
        "experts so that their load is split over the copies (expert-parallel load balancing, EPLB: DeepSeek-V3 "
        "§3.4, 32 redundant experts over 32 ranks in prefill; deepseek-ai/EPLB); they cost each rank their "
        "weights (docs/moe.md)")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError("pad_to_capacity needs a capacity_factor")
        if self.redundant_experts and self.capacity_factor is not None:
            raise ValueError("redundant_experts needs dropless routing (capacity_factor None): replicas split the "
                             "hottest experts' load, a capacity drops it")
        return self


class MoeHost(Spec):
    """The host (CPU) side of an MoE layer's forward as a software stack issues it (docs/moe.md): what its
    fusions and CUDA graphs leave to launch one by one, and whether its token dispatcher waits on the device."""

    op: Seconds = Field(0.0, description="host time to issue one eager kernel: Python, the PyTorch dispatcher "
                        "and cudaLaunchKernel (a CUDA graph replays many as one)")
    ops: NonNegativeInt = Field(0, description="kernels the host issues one by one in an MoE layer's forward "
                                "(its attention block included) outside CUDA graphs and besides the per-expert "
                                "GEMM calls (`Strategy.expert_gemm_call`)")
    dispatch_sync: bool = Field(False, description="the token dispatcher blocks the host once per MoE layer "
                                "forward until the device has counted the tokens (Megatron-Core's dropless "
                                "alltoall dispatcher before its all-to-all, HybridEP without a token bound, "
                                "DeepEP's normal dispatch): the host cannot run ahead of that layer, whose "
                                "forward takes at least the time to issue it")
