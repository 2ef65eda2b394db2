"""Parallelization strategy: how one training step is split over devices and what is traded for memory.

`Strategy` is the spec; the choices its fields take live by concept beside it (and are importable from here):
parallelism.py (ZeRO, schedules, rank order, context / tensor parallel, overlap), training_precision.py (the
numeric recipe), recompute.py, kernels.py (attention, loss, activation kernels), moe_routing.py, offload.py."""

from __future__ import annotations

from typing import Any, Self

from pydantic import Field, PositiveFloat, PositiveInt, model_validator

from armillary.plan import rules
from armillary.specs.base import Spec
from armillary.specs.kernels import ActivationKernels, Attention, CrossEntropy
from armillary.specs.moe_routing import MoeHost, Routing
from armillary.specs.offload import Offload
from armillary.specs.parallelism import ContextParallel, Overlap, RankOrder, Schedule, TpLayout, TpOverlap, ZeroStage
from armillary.specs.pipeline_layout import layout_stage_layers
from armillary.specs.quantity import BytesOrZero, BytesPerSecond, Seconds
from armillary.specs.recompute import Recompute, RecomputeModule
from armillary.specs.training_precision import (
    BlockFormat,
    MainParamPrecision,
    OptimizerStatePrecision,
    ProjectionPrecision,
    QuantizedGemms,
    TrainingPrecision,
)

__all__ = ["ActivationKernels", "Attention", "BlockFormat", "ContextParallel", "CrossEntropy", "MainParamPrecision",
           "MoeHost", "Offload", "OptimizerStatePrecision", "Overlap", "ProjectionPrecision",
           "QuantizedGemms", "RankOrder", "Recompute", "RecomputeModule", "Routing", "Schedule", "Strategy",
           "TpLayout", "TpOverlap", "TrainingPrecision", "ZeroStage"]


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
        "mxfp4 (Blackwell, CDNA 4), int8 (AQT's per-channel int8 on the devices that list an int8 rate: TPU v5p, "
        "v6e; training only, serving refuses it); with precision bf16 (Megatron --bf16 --fp4-format e2m1: memory as "
        "bf16's) or fp8 (--fp8-recipe mxfp8: memory as fp8's, a quantized weight copy and quantized saved inputs)")
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
