"""Parallelization strategy: how one training step is split over devices and what is traded for memory."""

from __future__ import annotations

from enum import IntEnum, StrEnum
from typing import Any, Self

from pydantic import Field, NonNegativeInt, PositiveFloat, PositiveInt, model_validator

from armillary.plan import rules
from armillary.specs.base import Spec
from armillary.specs.pipeline_layout import layout_stage_layers
from armillary.specs.quantity import BytesOrZero, BytesPerSecond, Seconds


class Recompute(StrEnum):
    """Activation recomputation (Korthikanti et al. 2022, §5)."""

    NONE = "none"
    SELECTIVE = "selective"  # recompute the attention core (QK^T, softmax, dropout, attention over V)
    FULL = "full"  # store only each layer's input, recompute the whole layer in backward


class RecomputeModule(StrEnum):
    """What selective recomputation re-runs (Megatron-Core --recompute-modules): the module's outputs are
    not stored but recomputed from its input in the backward pass."""

    CORE_ATTN = "core_attn"  # scores, softmax, dropout, attention over V (Korthikanti et al. §5)
    LAYERNORM = "layernorm"  # the two pre-norms (their outputs feed QKV and the MLP)
    MLP = "mlp"  # the dense MLP of dense layers
    SHARED_EXPERTS = "shared_experts"  # the shared experts of MoE layers
    MOE_ACT = "moe_act"  # the routed experts' activation function
    MLA_UP_PROJ = "mla_up_proj"  # MLA's up-projections: only the latents are kept
    MOE = "moe"  # the whole MoE layer: router, dispatch / combine (re-run with their communication), experts
    # every element-wise kernel of the layer: norms, residual adds, rotary embedding, activation
    ELEMENTWISE = "elementwise"
    # every second matmul of a layer in forward order, with Q, K, V and gate, up as separate linears: K, the
    # output projection and up (down without a gate) (torchtitan's op-level selective checkpointing)
    ALTERNATE_MATMULS = "alternate_matmuls"


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


class TrainingPrecision(StrEnum):
    """Numeric recipe. fp8: fp8 GEMMs with bf16 activations and weights elsewhere (Transformer Engine).
    A block-scaled format for the linear layers' GEMMs is `Strategy.block_format`."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"


class BlockFormat(StrEnum):
    """The block-scaled format of the linear layers' GEMMs (`specs.formats`; docs/fp4.md): Transformer
    Engine's MXFP8BlockScaling (Megatron --fp8-recipe mxfp8) and NVFP4BlockScaling (--fp4-format e2m1
    --fp4-recipe nvfp4) recipes, MXFP4 as CDNA 4 runs it. Weights, activations and gradients stay bf16; each
    GEMM input is quantized by a kernel of its own. none: the precision's own GEMMs (per-tensor fp8 under fp8)."""

    NONE = "none"
    MXFP8 = "mxfp8"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"


class OptimizerStatePrecision(StrEnum):
    """Storage precision of Adam's first and second moments (Megatron-Core --exp-avg-dtype /
    --exp-avg-sq-dtype with --use-precision-aware-optimizer: Transformer Engine's FusedAdam keeps them in it
    and computes in fp32)."""

    FP32 = "fp32"
    BF16 = "bf16"
    FP16 = "fp16"


class CrossEntropy(StrEnum):
    """How the loss is computed, which fixes what its logits hold in HBM (`memory.logit_bytes`)."""

    FUSED = "fused"  # a fused / vocab-parallel cross-entropy (Megatron): fp32 logits and their 16-bit source
    EAGER_FP32 = "eager_fp32"  # logits cast to fp32, PyTorch's F.cross_entropy op by op (torchtitan of 2024)


class ActivationKernels(StrEnum):
    """What a layer's kernels keep for backward (`memory.LayerActivations`)."""

    FUSED = "fused"  # fused kernels (Megatron-Core / Transformer Engine): Korthikanti et al. 2022's count
    EAGER = "eager"  # PyTorch autograd op by op, as LitGPT's 2023 model code runs it (`memory.eager_activations`)


class MainParamPrecision(StrEnum):
    """Storage precision of the optimizer's main parameters (Megatron-Core --main-params-dtype)."""

    FP32 = "fp32"
    FP16 = "fp16"


class ProjectionPrecision(StrEnum):
    """The precision of the attention projections (QKV, output) under a quantized recipe."""  # QuantizedGemms

    RECIPE = "recipe"  # the recipe's format, as the MLP (Transformer Engine recipes on every linear layer)
    FP8 = "fp8"  # per-tensor fp8 (NVIDIA's MaxText NVFP4 recipe quantizes only the MLP; attention stays fp8)
    BF16 = "bf16"


class QuantizedGemms(Spec):
    """Which weight GEMMs a quantized recipe (precision fp8, or a block format) keeps in higher precision.
    The attention core, the LM head and the MoE router always stay in bf16."""

    first_layers_bf16: NonNegativeInt = Field(
        0, description="the first this many layers run every GEMM in bf16 (Megatron --first-last-layers-bf16 "
        "--num-layers-at-start-in-bf16; the NVFP4 pretraining recipe keeps the first 2 of 62 blocks, "
        "arXiv:2509.25149 §4.1); priced as the average over the layers")
    last_layers_bf16: NonNegativeInt = Field(
        0, description="the same for the last layers (--num-layers-at-end-in-bf16; the NVFP4 recipe: the last 8)")
    attention_projections: ProjectionPrecision = Field(
        ProjectionPrecision.RECIPE, description="QKV and output projections in the recipe's format, in fp8 "
        "(MaxText's NVFP4 recipe: only the MLP in FP4) or in bf16")


class Attention(StrEnum):
    """Attention kernel. flash: FlashAttention-2 (fused, tiled, no s x s tensor in HBM; Dao 2023);
    flash1: FlashAttention-1 (Dao et al. 2022); flash3: FlashAttention-3 / cuDNN fused attention on Hopper
    and later (Shah et al. 2024), faster per FLOP."""

    STANDARD = "standard"
    FLASH1 = "flash1"
    FLASH = "flash"
    FLASH3 = "flash3"


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


class Offload(Spec):
    """What lives outside HBM: in the system's memory pool where it has one, else in the device's second tier
    (`System.offload_path`; docs/memory-pool.md)."""

    weights: bool = Field(False, description="every weight, each layer's fetched before its forward and its "
                          "backward, two layers held in HBM")
    activations: bool = False
    optimizer: bool = Field(False, description="the optimizer states; the step streams them over the offload path")
    gradients: bool = Field(False, description="the gradient buffer, each micro-batch's gradients sent out as the "
                            "backward makes them and accumulated there, two layers' held in HBM (ZeRO-Offload, Ren "
                            "et al. ATC'21 §4.1: fp32 gradients and the optimizer step off the device); needs "
                            "optimizer")
    experts: bool = Field(False, description="the routed experts' weights only (MoE), each MoE layer's fetched before "
                          "its forward and its backward, two layers' held in HBM")
    activation_layers: PositiveInt | None = Field(
        None, description="with activations: offload those of only the first this many layers of each model "
        "chunk, the others stay in HBM (Transformer Engine cpu_offloading num_layers, Megatron-Core "
        "--cpu-offloading-num-layers, which NVIDIA's GB200 / GB300 recipes set); None: every layer's")

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.activation_layers is not None and not self.activations:
            raise ValueError("offload.activation_layers needs offload.activations")
        if self.gradients and not self.optimizer:
            raise ValueError("offload.gradients needs offload.optimizer: the gradients go where the optimizer step "
                             "runs (ZeRO-Offload)")
        return self


class Strategy(Spec):
    tp: PositiveInt = 1
    pp: PositiveInt = 1
    cp: PositiveInt = Field(1, description="context-parallel degree: the sequence is split over cp ranks")
    cp_comm: ContextParallel = ContextParallel.RING
    dp: PositiveInt | None = Field(None, description="defaults to devices / (tp * cp * pp)")
    ep: PositiveInt = Field(1, description="expert-parallel degree: each rank holds experts / ep routed experts; "
                            "expert layers regroup the tp x cp x dp ranks as etp x ep x expert-dp")
    expert_tp: PositiveInt | None = Field(None, description="tensor parallelism inside each expert; "
                                          "defaults to tp (Megatron-Core's default)")
    routing: Routing = Routing()
    attention_dp: PositiveInt = Field(1, description="inference: attention data-parallel over this many groups "
                                      "of the tp ranks (SGLang --enable-dp-attention sets it to tp), each with "
                                      "its own requests and KV cache; the MLP and experts span all tp ranks")
    rank_order: RankOrder = Field(RankOrder.DP_INNER, description="which groups sit closest: "
                                  "tp-cp-dp-pp (Megatron's default) or tp-cp-pp-dp")
    vpp: PositiveInt = Field(1, description="model chunks per pipeline rank (interleaved schedule)")
    schedule: Schedule | None = Field(None, description="defaults to interleaved when vpp > 1, else 1f1b")
    first_stage_layers: PositiveInt | None = Field(
        None, description="layers of the first pipeline stage (uneven split, as Megatron's option); "
        "the other stages share the rest evenly"
    )
    last_stage_layers: PositiveInt | None = Field(None, description="layers of the last pipeline stage")
    pipeline_layout: str | None = Field(
        None, description="which layers each model chunk holds, in Megatron-Core's --pipeline-model-parallel-layout "
        "syntax: chunks separated by '|' in layer order (chunk i on pipeline rank i mod pp), 'E' the embedding, "
        "'t' a transformer layer, 'L' the loss, (..)*n and x*n repeats, e.g. 'Et|(tt|)*30L'; a chunk may hold the "
        "embedding or the loss alone. It sets first_stage_layers and last_stage_layers; the stages between must "
        "hold equal layers (docs/moe.md)")
    micro_batch: PositiveInt = 1
    sequence_parallel: bool = False
    tp_layout: TpLayout = Field(
        TpLayout.ONE_D, description="how the tp ranks split each linear layer: 1d (Megatron's column/row-parallel "
        "pair) or 2d (SUMMA on a q x q grid, tp = q^2: Optimus / Colossal-AI 2-D; docs/tp-layouts.md); 2d needs q to "
        "divide micro_batch and excludes sequence_parallel, context and expert parallelism")
    summa_steps: PositiveInt | None = Field(
        None, description="tp_layout 2d: steps (panels) of each SUMMA product, a multiple of q (van de Geijn & "
        "Watts 1997: panels of width k / steps); each step's transfer overlaps the previous step's GEMM, the first "
        "stays exposed. None: q steps, one grid block each (Colossal-AI's Matmul_AB_2D)")
    recompute: Recompute = Recompute.NONE
    recompute_modules: tuple[RecomputeModule, ...] = Field(
        (RecomputeModule.CORE_ATTN,), description="what recompute 'selective' re-runs (Megatron's default: "
        "core_attn; MoE recipes add moe_act, layernorm, mla_up_proj...)")
    recompute_layers: PositiveInt | None = Field(
        None, description="recompute 'full' of only the first this many layers of each model chunk, the others "
        "keep their activations (Megatron --recompute-method block --recompute-num-layers); None: every layer")
    attention: Attention = Attention.STANDARD
    zero: ZeroStage = ZeroStage.NONE
    zero3_live_parameters: PositiveFloat | None = Field(
        None, description="ZeRO-3: the most gathered parameters held at once, never less than the largest "
        "weight matrix (DeepSpeed stage3_max_live_parameters, default 1e9); None: two whole layers, the one in "
        "use and the prefetched one (PyTorch FSDP / Megatron-FSDP units)")
    zero3_gather_rate: BytesPerSecond | None = Field(
        None, description="ZeRO-3: the most gathered parameter bytes per second a device's gathers reach, "
        "whatever the network (an implementation slower than its network: DeepSpeed before v0.5.5 gathered "
        "weight by weight, synchronising the device before each); None: the network's rate")
    zero3_rank_copy: Seconds | None = Field(
        None, description="ZeRO-3: host time per data-parallel rank for every parameter tensor gathered "
        "(DeepSpeed before v0.5.5 gathered tensor by tensor through list-based all_gather, whose result PyTorch "
        "copies out one rank's slice at a time); None: none")
    expert_gemm_call: Seconds | None = Field(
        None, description="MoE: the least time each local expert adds to a grouped expert GEMM (forward, input "
        "gradient and weight gradient alike), where the stack runs it as a loop of one library call per expert "
        "(Transformer Engine's multi-stream cuBLASLt GroupedLinear) whose host and launch time no small expert "
        "hides; None: a single-launch grouped kernel")
    moe_host: MoeHost = Field(MoeHost(), description="MoE: the host's side of an MoE layer's forward (kernels "
                              "it issues one by one, the dispatcher's wait for token counts); the default: none")
    overlap: Overlap = Overlap()
    offload: Offload = Offload()
    memory_reserve: BytesOrZero | None = Field(
        None, description="HBM per device the runtime holds outside the model's tensors (CUDA context, GEMM "
        "library workspaces, communicator buffers: docs/formulas.md §4.5); None: the device's "
        "(`Device.memory_reserve`: 2 GiB on CUDA / ROCm GPUs, what XLA keeps back on a TPU)")
    fragmentation: float = Field(
        0.0, ge=0, lt=1, description="share of the tensors' HBM that the allocator's fragmentation adds on top "
        "(PyTorch caching allocator; 0: expandable segments, which NVIDIA's recipes set)")
    precision: TrainingPrecision = TrainingPrecision.BF16
    block_format: BlockFormat = Field(
        BlockFormat.NONE, description="the linear layers' GEMMs in a block-scaled format: mxfp8, nvfp4 (Blackwell), "
        "mxfp4 (Blackwell, CDNA 4); with precision bf16 (Megatron --bf16 --fp4-format e2m1: memory as bf16's) or "
        "fp8 (--fp8-recipe mxfp8: memory as fp8's, a quantized weight copy and quantized saved inputs)")
    quantized_gemms: QuantizedGemms = Field(QuantizedGemms(), description="which weight GEMMs a quantized "
                                            "recipe (fp8 or a block format) keeps in higher precision")
    fp8_params: bool = Field(
        False, description="the model's weights are kept in fp8 only, with no 16-bit copy, and the distributed "
        "optimizer's parameter all-gather moves fp8 (Transformer Engine fp8_model_init, Megatron-LM "
        "--fp8-param-gather, NeMo fp8_params; under nvfp4 / mxfp4 the FP4 copies, --fp4-param-gather); the "
        "optimizer keeps its fp32 main parameters. Needs a quantized recipe (precision fp8 or a block_format) and "
        "a sharded optimizer (zero >= 1)")
    optimizer_states: OptimizerStatePrecision = Field(
        OptimizerStatePrecision.FP32, description="precision of Adam's two moments: fp32, or bf16 / fp16 "
        "(Megatron-Core --use-precision-aware-optimizer --exp-avg-dtype --exp-avg-sq-dtype; DeepSeek-V3 "
        "report §3.3.3 keeps them in bf16)")
    main_params: MainParamPrecision = Field(
        MainParamPrecision.FP32, description="precision of the optimizer's main (master) parameters beside "
        "16-bit or fp8 weights: fp32, or fp16 (Megatron-Core --main-params-dtype with the precision-aware "
        "optimizer); fp32 training has none")
    cross_entropy: CrossEntropy = Field(
        CrossEntropy.FUSED, description="the loss kernel: fused (a fused or vocab-parallel cross-entropy, "
        "Megatron-Core's: 4 + 2 bytes per logit) or eager_fp32 (the logits cast to fp32 and PyTorch's "
        "F.cross_entropy run op by op, as torchtitan did in 2024: 12 bytes per logit at the start of backward)")
    activation_kernels: ActivationKernels = Field(
        ActivationKernels.FUSED, description="what the layers' kernels keep for backward: fused (Megatron-Core / "
        "Transformer Engine: Korthikanti et al.'s count) or eager (PyTorch autograd op by op, LitGPT of 2023: the "
        "gated MLP's SiLU output kept by the multiply, rotated Q and K copied beside the QKV output, a LoRA on part "
        "of the fused QKV keeping its scattered output)")
    grad_reduce_in_bf16: bool = Field(
        False, description="reduce the data-parallel gradients in bf16 (2 bytes per parameter) instead of the "
        "fp32 main gradients (4; Megatron-Core's default, --accumulate-allreduce-grads-in-fp32): Megatron-LM's "
        "--grad-reduce-in-bf16 (DistributedDataParallelConfig.grad_reduce_in_fp32 = False); precision bf16 or "
        "fp8 (fp16 gradients are reduced in fp16 already)")
    pp_scatter_gather: bool = Field(
        True, description="send 1/tp of each pipeline activation across nodes, all-gather inside (SC21 §4.1)"
    )

    @model_validator(mode="before")
    @classmethod
    def _layout(cls, data: Any) -> Any:
        """A pipeline_layout sets the first and last stages' layers (`layout_stage_layers`)."""
        if not isinstance(data, dict) or data.get("pipeline_layout") is None:
            return data
        first, last = layout_stage_layers(str(data["pipeline_layout"]), int(data.get("pp", 1)),
                                          int(data.get("vpp", 1)))
        given = (data.get("first_stage_layers"), data.get("last_stage_layers"))
        if given != (None, None) and given != (first, last):  # a dumped strategy carries the layout's own
            raise ValueError(f"pipeline_layout puts {first} / {last} layers on the first / last stage, but "
                             f"first_stage_layers / last_stage_layers say {given[0]} / {given[1]}: give one of them")
        return {**data, "first_stage_layers": first, "last_stage_layers": last}

    @model_validator(mode="after")
    def _check(self) -> Self:
        if self.vpp > 1 and self.schedule not in (None, Schedule.INTERLEAVED):
            raise ValueError(f"vpp={self.vpp} needs schedule 'interleaved', not {self.schedule.value!r}")
        if self.schedule is Schedule.INTERLEAVED and self.vpp < 2:
            raise ValueError("schedule 'interleaved' needs vpp >= 2 model chunks per pipeline rank")
        if self.recompute is not Recompute.SELECTIVE and self.recompute_modules != (RecomputeModule.CORE_ATTN,):
            raise ValueError("recompute_modules apply to recompute 'selective' only")
        if self.recompute is not Recompute.FULL and self.recompute_layers is not None:
            raise ValueError("recompute_layers applies to recompute 'full' only")
        if self.grad_reduce_in_bf16 and self.precision not in (TrainingPrecision.BF16, TrainingPrecision.FP8):
            raise ValueError(f"grad_reduce_in_bf16 needs precision 'bf16' or 'fp8', not {self.precision.value!r} "
                             "(fp32 training reduces fp32 gradients, fp16 training fp16 ones)")
        if self.block_format is not BlockFormat.NONE and self.precision not in (TrainingPrecision.BF16,
                                                                                TrainingPrecision.FP8):
            raise ValueError(f"block_format {self.block_format.value!r} needs precision 'bf16' or 'fp8' (the block-"
                             f"scaled recipes keep bf16 weights and activations), not {self.precision.value!r}")
        if self.fp8_params and not self.quantized:
            raise ValueError("fp8_params needs a quantized recipe: precision 'fp8' or a block_format (mxfp8, nvfp4, "
                             f"mxfp4), not precision {self.precision.value!r} alone")
        if self.fp8_params and self.zero is ZeroStage.NONE:
            raise ValueError("fp8_params needs zero 1, 2 or 3: the fp32 main parameters live in a sharded optimizer "
                             "(Megatron-LM --fp8-param-gather needs --use-distributed-optimizer or FSDP)")
        if self.main_params is not MainParamPrecision.FP32 and self.precision is TrainingPrecision.FP32:
            raise ValueError(f"main_params {self.main_params.value!r} needs precision 'bf16', 'fp16' or 'fp8': fp32 "
                             "training updates its fp32 weights directly, with no main copy")
        if self.quantized_gemms != QuantizedGemms() and not self.quantized:
            raise ValueError("quantized_gemms applies to a quantized recipe: precision 'fp8' or a block_format "
                             f"(mxfp8, nvfp4, mxfp4), not precision {self.precision.value!r} alone")
        broken = rules.failed((
            rules.rank_order_without_ep(float(self.rank_order is RankOrder.PP_INNER), self.ep),
            rules.sequence_parallel_needs_tp(float(self.sequence_parallel), self.tp),
            rules.attention_dp_divides_tp(self.attention_dp, self.tp),
            rules.uneven_stages_supported(self.first_stage_layers or 0, self.last_stage_layers or 0, self.pp,
                                          self.vpp),
            *rules.tp_layout_checks(float(self.tp_layout is TpLayout.TWO_D), self.tp, self.micro_batch,
                                    float(self.sequence_parallel), self.cp, self.ep,
                                    float(self.expert_tp is not None),
                                    float(self.overlap.tp_comm_method is TpOverlap.RING), self.summa_steps or 0)))
        if broken:
            raise ValueError(broken[0])
        return self

    @property
    def quantized(self) -> bool:
        """The linear layers' GEMMs run in an 8- or 4-bit format: fp8, or a block format."""
        return self.precision is TrainingPrecision.FP8 or self.block_format is not BlockFormat.NONE

    @property
    def etp(self) -> int:
        return self.expert_tp if self.expert_tp is not None else self.tp

    @property
    def pipeline_schedule(self) -> Schedule:
        if self.schedule is not None:
            return self.schedule
        return Schedule.INTERLEAVED if self.vpp > 1 else Schedule.ONE_F_ONE_B
