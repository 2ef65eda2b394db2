"""A training software stack's defaults (Megatron-LM 2021, Megatron-Core, NeMo, FSDP, torchtitan...).

Published runs rarely state every setting: the framework that ran them fixes the rest (which attention
kernel, which communication overlaps, what its "FSDP" shards, the precision of its performance recipes).
A stack profile is a data file (presets/stacks) saying those defaults with sources; a run file or a
validation row names its stack and the strategy takes the defaults it leaves unstated.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, PositiveInt, model_validator

from armillary.specs.base import NamedByPatterns, Spec
from armillary.specs.pipeline_layout import layout_stage_layers, pipeline_chunks
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


def layout_with_mtp(layout: str, depth: int) -> str:
    """A pipeline layout with 'm' x `depth` multi-token-prediction modules just before the loss 'L'
    (Megatron-Bridge's recipe: `last_layer = ["mtp"] * mtp_num_layers + ["loss"]`)."""
    at = layout.rindex("L")
    return layout[:at] + "m" * depth + layout[at:]


class RecipeLayout(Spec):
    """The pipeline layout a stack's recipe sets for one model on pp x vpp model chunks (Megatron-Bridge's
    DeepSeek-V3 recipe picks it from a table by (pp, vpp)), in Megatron-Core's layout syntax
    (`Strategy.pipeline_layout`) without multi-token-prediction modules: the recipe places the run's
    ('m' x depth) just before the loss (`with_mtp`)."""

    model: str = Field(min_length=1, description="the model preset the recipe is for (presets/models name)")
    pp: PositiveInt = Field(description="pipeline ranks of the table entry")
    vpp: PositiveInt = Field(1, description="model chunks per pipeline rank of the table entry")
    layout: str = Field(min_length=1, description="the chunks' layers, e.g. 'Et*4|(t*4|)*14tL'; no 'm'")
    source: str = Field(min_length=1, description="where the recipe sets it (file and function @ tag)")

    @model_validator(mode="after")
    def _parses(self) -> RecipeLayout:
        try:
            layout_stage_layers(self.layout, self.pp, self.vpp)
        except ValueError as err:
            raise ValueError(f"pipeline_layouts ({self.model}, pp {self.pp}, vpp {self.vpp}): {err}") from None
        if "m" in "".join(pipeline_chunks(self.layout)):
            raise ValueError(f"pipeline_layouts ({self.model}, pp {self.pp}, vpp {self.vpp}): {self.layout!r} names "
                             "multi-token-prediction modules 'm'; a table entry leaves them out (the run's depth "
                             "is placed before the loss)")
        return self

    def with_mtp(self, depth: int) -> str:
        """The layout of a run training `depth` multi-token-prediction modules (`layout_with_mtp`)."""
        return layout_with_mtp(self.layout, depth)


# the precision names of Megatron-Bridge's performance scripts (scripts/performance/utils/helpers.py
# get_precision_config @ v0.2.0: bf16, fp8_cs current scaling, fp8_mx MXFP8, fp8_sc sub-channel, nvfp4)
RECIPE_PRECISIONS = ("bf16", "fp8_cs", "fp8_mx", "fp8_sc", "nvfp4")


class RecipeSettings(Spec):
    """What a stack's performance recipe sets for one model on one GPU type in one release (Megatron-Bridge's
    scripts/performance workload_base_configs): the memory settings any model's recipe has (recomputation, CPU
    activation offloading, Megatron FSDP, CUDA graphs) and, for an MoE model, its MoE layers' (the token
    dispatcher, token dropping, CUDA graph scopes, batch-level all-to-all overlap), each entry with its source.
    A run of that model, GPU and release takes them; what the recipe sets that the run's own table states
    otherwise (`differs`) is recorded, the table kept."""

    model: str = Field(min_length=1, description="the model preset the recipe is for (presets/models name)")
    gpu: str = Field(pattern=r"^[a-z0-9]+$", description="the GPU type, lower case as the recipe names it "
                     "(h100, b200, gb200, gb300)")
    release: str = Field(pattern=r"^\d\d\.\d\d(\.\d\d)?$", description="the container release, e.g. '25.11', "
                         "'26.04.01'")
    dispatcher: str | None = Field(None, pattern=r"^(alltoall|hybridep|deepep)$", description="MoE: the token "
                                   "dispatcher: Megatron-Core's alltoall, or its flex dispatcher with the HybridEP "
                                   "or DeepEP backend (one copy per node: `Routing.dispatch_dedup`); None: a dense "
                                   "model's entry, or not stated")
    capacity_factor: float | None = Field(None, gt=0, description="token dropping at this expert capacity "
                                          "(`Routing.capacity_factor`); None: dropless")
    pad_to_capacity: bool = Field(False, description="every expert padded to its capacity "
                                  "(`Routing.pad_to_capacity`): token counts known without a host sync")
    cuda_graph_scope: tuple[str, ...] = Field((), description="what the CUDA graphs capture: Transformer "
                                              "Engine's per-layer scopes (attn, moe_router, moe_preprocess) or "
                                              "Megatron-Core's whole step (full_iteration, cuda_graph_impl local); "
                                              "(): none")
    recompute_modules: tuple[RecomputeModule, ...] | None = Field(
        None, description="the modules the recipe recomputes (selective); None: none by module")
    recompute_layers: PositiveInt | None = Field(
        None, description="full recomputation of the first this many layers of each model chunk (the recipe's "
        "recompute_num_layers: recompute_granularity full, recompute_method block, `Strategy.recompute_layers`); "
        "None: none by layer")
    offload_activation_layers: PositiveInt | None = Field(
        None, description="the activations of the first this many layers of each model chunk offloaded to the "
        "host (the recipe's cpu_offloading_num_layers: Megatron-Core cpu_offloading, weights kept; "
        "`Offload.activation_layers`); None: none")
    fsdp: bool = Field(False, description="the recipe shards with Megatron FSDP (use_megatron_fsdp); its memory "
                       "settings are for that sharding, so a run whose table states other sharding does not take "
                       "them")
    a2a_overlap: bool = Field(False, description="batch-level overlap of the expert all-to-all with another "
                              "micro-batch's computation (Megatron-Core --overlap-moe-expert-parallel-comm "
                              "--delay-wgrad-compute: `Overlap.ep_comm`)")
    mtp: bool | None = Field(None, description="the recipe trains the model's multi-token-prediction modules "
                             "(`Training.mtp`); None: the entry does not say (the run's words decide)")
    layout: str | None = Field(None, description="the pipeline layout the recipe passes for this GPU, in "
                               "Megatron-Core's syntax without 'm' (`RecipeLayout.layout`); None: the stack's "
                               "table by (pp, vpp), if any")
    param_gather_overlap_off: tuple[str, ...] = Field(
        (), description="the recipe's precisions (Megatron-Bridge's compute_dtype names: bf16, fp8_cs, fp8_mx, "
        "nvfp4) under which it turns the distributed optimizer's overlapped parameter all-gather off "
        "(overlap_param_gather False: `Overlap.param_gather`); (): overlapped under every precision")
    differs: str = Field("", description="what the recipe sets that the published table states otherwise")
    source: str = Field(min_length=1, description="where the recipe sets it (file and name @ tag)")

    @model_validator(mode="after")
    def _check(self) -> RecipeSettings:
        known = {"attn", "moe_router", "moe_preprocess", "full_iteration"}
        if not set(self.cuda_graph_scope) <= known:
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): cuda_graph_scope "
                             f"{sorted(set(self.cuda_graph_scope) - known)} unknown (expected {sorted(known)})")
        if "full_iteration" in self.cuda_graph_scope and len(self.cuda_graph_scope) > 1:
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): cuda_graph_scope full_iteration "
                             "captures the whole step; it takes no other scope")
        if self.recompute_layers is not None and self.recompute_modules is not None:
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): recompute_layers (full) and "
                             "recompute_modules (selective) exclude each other")
        if not set(self.param_gather_overlap_off) <= set(RECIPE_PRECISIONS):
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): param_gather_overlap_off "
                             f"{sorted(set(self.param_gather_overlap_off) - set(RECIPE_PRECISIONS))} unknown "
                             f"(expected some of {list(RECIPE_PRECISIONS)})")
        if self.pad_to_capacity and self.capacity_factor is None:
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): pad_to_capacity needs a "
                             "capacity_factor")
        if self.layout is not None and "m" in "".join(pipeline_chunks(self.layout)):
            raise ValueError(f"recipes ({self.model}, {self.gpu}, {self.release}): layout {self.layout!r} names "
                             "multi-token-prediction modules 'm'; an entry leaves them out (`mtp` places them)")
        return self

    def with_mtp(self, depth: int) -> str | None:
        """The recipe's layout with 'm' x depth just before the loss (`RecipeLayout.with_mtp`); None: none."""
        return None if self.layout is None else layout_with_mtp(self.layout, depth)


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
    device_batch: bool = Field(
        False, description="the stack's batch setting is per device, model-parallel devices included (MaxText "
        "per_device_batch_size: the global batch is it times every device, sharded over the data-parallel axes "
        "only): each data-parallel rank runs it times tp x cp sequences at once, without gradient accumulation")
    seq_len: PositiveInt | None = Field(
        None, description="sequence length of the stack's example training configs, for runs that omit it")
    pipeline_layouts: tuple[RecipeLayout, ...] = Field(
        (), description="pipeline layouts the stack's recipes set by model and (pp, vpp), each with its source; "
        "a run of that model and shape that states no layout of its own takes it")
    recipes: tuple[RecipeSettings, ...] = Field(
        (), description="what the stack's performance recipes set by model, GPU type and release (memory "
        "settings, and MoE settings for an MoE model), each with its source; a run of that model, GPU and release "
        "takes them")
    graph_host_ops: dict[str, int] = Field(
        default_factory=dict, description="kernels an MoE layer's forward issues one by one (`MoeHost.ops`) by "
        "the CUDA graph scopes of a recipe, keyed by the scopes sorted and joined with '+' ('' for none)")
    sources: dict[str, str] = Field(default_factory=dict, description="field -> where the default comes from")


    fp8_params: bool = Field(False, description="the stack's fp8 recipes keep the weights in fp8 only "
                             "(`Strategy.fp8_params`)")

    def recipe_layout(self, model: str, pp: int, vpp: int) -> RecipeLayout | None:
        """The layout the stack's recipe sets for `model` (a preset name) on pp x vpp chunks; None: none."""
        return next((e for e in self.pipeline_layouts if (e.model, e.pp, e.vpp) == (model, pp, vpp)), None)

    def recipe(self, model: str, gpu: str, release: str) -> RecipeSettings | None:
        """What the stack's recipe sets for `model` (a preset name) on `gpu` in `release`; None: no entry."""
        return next((e for e in self.recipes if (e.model, e.gpu, e.release) == (model, gpu, release)), None)

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
