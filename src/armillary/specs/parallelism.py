"""How a training step is split over devices and what of its communication overlaps: ZeRO sharding,
pipeline schedules, rank order, context-parallel exchange, tensor-parallel layout and overlap."""

from __future__ import annotations

from enum import IntEnum, StrEnum

from pydantic import Field

from armillary.specs.base import Spec


class ZeroStage(IntEnum):
    """What data-parallel ranks shard (Rajbhandari et al., SC'20 §5). Stage 1 with reduce-scatter +
    all-gather is Megatron's distributed optimizer; stage 3 is FSDP FULL_SHARD."""

    NONE = 0
    OPTIMIZER = 1
    GRADIENTS = 2
    PARAMETERS = 3


class Schedule(StrEnum):
    GPIPE = "gpipe"
    ONE_F_ONE_B = "1f1b"
    INTERLEAVED = "interleaved"  # interleaved 1F1B with `vpp` model chunks per pipeline rank
    ZB_H1 = "zb-h1"  # zero-bubble ZB-H1: weight gradients split off to fill the drain (Qi et al. ICLR'24 §3.1)


class RankOrder(StrEnum):
    """How parallel groups map onto the network tiers: consecutive ranks share a node, so the dimensions
    listed first get the scale-up network (Megatron-Core's RankGenerator `order`). tp-cp-dp-pp is
    Megatron's default (pipeline groups have the largest stride); tp-cp-pp-dp keeps pipeline neighbours
    close and spreads data-parallel groups across nodes instead."""

    DP_INNER = "tp-cp-dp-pp"
    PP_INNER = "tp-cp-pp-dp"


class ContextParallel(StrEnum):
    """How context parallelism exchanges the sequence: ring attention passes K/V blocks around the ring,
    overlapped with attention (Liu et al. 2023; Megatron CP); all_to_all re-shards sequence <-> heads around
    attention (Ulysses, Jacobs et al. 2023)."""

    RING = "ring"
    ALL_TO_ALL = "all_to_all"


class TpOverlap(StrEnum):
    """How overlapped TP communication is split against its GEMMs. userbuffers: Transformer Engine's defaults
    (Megatron-Core / NeMo `tp_comm_overlap`): gathers into a GEMM by ring exchange in tp tiles, reduce-scatters
    after a GEMM pipelined in 4 pieces, the backward's input gather and reduce-scatter in bulk beside another
    GEMM, the pipelined and bulk kernels holding 16 SMs. ring: every gather and reduce-scatter decomposed into tp
    ring steps on copy engines (collective matmul, Wang et al. ASPLOS'23; PyTorch async TP in torchtitan)."""

    USERBUFFERS = "userbuffers"
    RING = "ring"


class TpLayout(StrEnum):
    """How tensor parallelism splits each linear layer over its tp ranks. 1d: Megatron's column- then
    row-parallel pair with one all-reduce (or all-gather + reduce-scatter) per block (SC'21 §3.2). 2d: the
    ranks form a q x q grid (tp = q^2) and every GEMM, its input and its weight are split q x q, multiplied by
    SUMMA in steps that broadcast a panel of the input along the grid's rows and one of the weight along its
    columns (Optimus, Xu et al. arXiv 2104.05343; Colossal-AI's 2-D tensor parallelism); docs/tp-layouts.md."""

    ONE_D = "1d"
    TWO_D = "2d"


class Overlap(Spec):
    """Which communication is overlapped with computation."""

    dp_grad_reduce: bool = Field(True, description="DP gradient reduction overlaps the backward pass")
    tp_comm: bool = Field(False, description="TP collectives overlap the GEMMs (userbuffers / TP overlap)")
    tp_comm_method: TpOverlap = Field(TpOverlap.USERBUFFERS, description="how, with tp_comm: tile by tile as "
                                      "Transformer Engine's userbuffers or as ring steps (async TP)")
    param_gather: bool = Field(True, description="ZeRO/FSDP parameter all-gather is prefetched ahead of use")
    ep_comm: bool = Field(False, description="MoE dispatch/combine all-to-alls overlap another micro-batch's "
                          "compute (DeepSeek-V3 DualPipe; Megatron --overlap-moe-expert-parallel-comm)")
