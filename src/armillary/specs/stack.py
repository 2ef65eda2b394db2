"""A training software stack's defaults (Megatron-LM 2021, Megatron-Core, NeMo, FSDP, torchtitan...).

Published runs rarely state every setting: the framework that ran them fixes the rest (which attention
kernel, which communication overlaps, what its "FSDP" shards, the precision of its performance recipes).
A stack profile is a data file (presets/stacks) saying those defaults with sources; a run file or a
validation row names its stack and the strategy takes the defaults it leaves unstated.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, PositiveInt

from armillary.specs.base import NamedByPatterns
from armillary.specs.quantity import BytesPerSecond, Seconds
from armillary.specs.strategy import (
    Attention,
    MoeHost,
    Overlap,
    Recompute,
    RecomputeModule,
    TrainingPrecision,
    ZeroStage,
)

_HOPPER_OR_LATER = re.compile(r"h100|h200|h800|h20\b|gh200|b100|b200|b300|gb[23]00|blackwell|hopper", re.I)


def hopper_or_later(gpu: str) -> bool:
    """Whether a GPU name is NVIDIA Hopper or later (where stacks pick FlashAttention-3-class kernels)."""
    return _HOPPER_OR_LATER.search(gpu) is not None


def merged(defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """`given` over `defaults`, mappings merged key by key (a run's overlap.tp_comm keeps the others)."""
    out = dict(defaults)
    for key, value in given.items():
        out[key] = merged(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


class SoftwareStack(NamedByPatterns):
    name: str
    years: tuple[int, int] | None = Field(
        None, description="first and last year the profile describes; a run of a known year whose framework "
        "text fits several stacks (a bare 'Megatron-LM') takes the one of its year")
    attention: Attention = Field(description="attention kernel")
    attention_hopper: Attention | None = Field(
        None, description="attention kernel on Hopper and later GPUs; defaults to `attention`")
    sequence_parallel: bool = Field(description="sequence parallelism whenever tp > 1")
    zero: ZeroStage = Field(description="what data-parallel ranks shard when the run states no sharding "
                            "(Megatron's distributed optimizer = 1, FSDP FULL_SHARD = 3)")
    overlap: Overlap = Field(description="which communication the stack overlaps with computation")
    precision: TrainingPrecision = Field(
        description="precision of the stack's published performance recipes when a run does not state one")
    recompute: Recompute | None = Field(
        None, description="recomputation the stack's recipes use; None = not fixed (the least that fits)")
    recompute_modes: tuple[Recompute, ...] | None = Field(
        None, description="the recomputation granularities the stack offers, for runs that state none (a 2021 "
        "Megatron had full recomputation only); None: every one")
    selective_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="what the stack's selective recomputation re-runs (`Strategy.recompute_modules`) "
        "when a run says 'selective'; None: the attention core only (Megatron's selective)")
    zero3_live_parameters: float | None = Field(
        None, gt=0, description="ZeRO-3's bound on gathered parameters held at once (`Strategy` field of the "
        "same name); None: two whole layers")
    zero3_gather_rate: BytesPerSecond | None = Field(
        None, description="ZeRO-3's parameter-gather rate per device whatever the network (`Strategy` field "
        "of the same name); None: the network's rate")
    zero3_rank_copy: Seconds | None = Field(
        None, description="ZeRO-3's host time per rank and gathered parameter tensor (`Strategy` field of the "
        "same name); None: none")
    expert_gemm_call: Seconds | None = Field(
        None, description="least time per local expert of each grouped expert GEMM (`Strategy` field of the "
        "same name); None: a single-launch grouped kernel")
    moe_host: MoeHost | None = Field(
        None, description="the host's side of an MoE layer's forward: the time to issue one kernel, the kernels "
        "the stack's fusions and CUDA graphs leave to issue one by one, whether its dispatcher waits for the "
        "token counts (`Strategy` field of the same name); None: no host model")
    grad_reduce_in_bf16: bool | None = Field(
        None, description="the stack's recipes reduce (and hold) the data-parallel gradients in bf16 "
        "(`Strategy` field of the same name); None: not fixed (Megatron-Core's fp32 main gradients)")
    local_batch: bool = Field(
        False, description="the stack's batch setting is each data-parallel rank's batch: no gradient "
        "accumulation by default, and pipeline stages split it into as many micro-batches as stages")
    seq_len: PositiveInt | None = Field(
        None, description="sequence length of the stack's example training configs, for runs that omit it")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the default comes from")


    fp8_params: bool = Field(False, description="the stack's fp8 recipes keep the weights in fp8 only "
                             "(`Strategy.fp8_params`)")

    def strategy_defaults(self, tp: int, hopper: bool) -> dict[str, Any]:
        """Strategy fields this stack fixes for a run with tensor-parallel degree `tp` (on a Hopper-or-later
        GPU when `hopper`); a run's own settings override them."""
        attention = self.attention_hopper if hopper and self.attention_hopper is not None else self.attention
        out: dict[str, Any] = dict(attention=attention, sequence_parallel=self.sequence_parallel and tp > 1,
                                   zero=self.zero, overlap=self.overlap.model_dump(), precision=self.precision)
        if not tp > 1:
            out["overlap"]["tp_comm"] = False
        if self.recompute is not None:
            out["recompute"] = self.recompute
        for name in ("zero3_live_parameters", "zero3_gather_rate", "zero3_rank_copy",
                     "expert_gemm_call", "grad_reduce_in_bf16"):  # Strategy's fields of the same names
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        if self.fp8_params and self.precision is TrainingPrecision.FP8:
            out["fp8_params"] = True
        if self.moe_host is not None:
            out["moe_host"] = self.moe_host.model_dump()
        return out
