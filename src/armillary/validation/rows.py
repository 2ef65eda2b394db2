"""Turn one measured training row of the validation CSV into specifications.

The model comes from the preset the row names (any spelling) and its architecture columns; a preset fills
only what the row leaves empty (MLP kind, norm, positions). The system comes from `gpu`, `n_gpus` and the
network columns; the strategy from the parallelism columns, and what they leave unstated from the row's
software stack (presets/stacks). Whatever the row does not state is assumed and written down.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from armillary.plan.layout import chunk_size, embedding_and_loss_split
from armillary.specs.loading import load_model, load_stack, load_system, stack_for
from armillary.specs.model import Model
from armillary.specs.pipeline_layout import layout_stage_layers
from armillary.specs.stack import SoftwareStack, hopper_or_later
from armillary.specs.strategy import BlockFormat, Recompute, Strategy, TrainingPrecision, ZeroStage
from armillary.specs.system import System
from armillary.specs.workload import BasePrecision, Lora, LoraTarget, Training
from armillary.validation.reading import BadValueError, about_the_run, fp8_params_stated, read_int, search_run
from armillary.validation.vocabulary import (
    block_format_of,
    clean,
    deduplicated_dispatch,
    flag,
    memory_gb_of,
    model_preset_for,
    mtp_of,
    pipeline_layout_of,
    precision_of,
    recompute_modules_of,
    recompute_of,
    sharding_of,
    system_preset_for,
)

DEFAULT_STACK = "megatron-core"  # a row that names no framework: today's most published stack


class Unsupported(Exception):  # noqa: N818 - a reason, not a failure
    """The row cannot be run yet; the message says why."""


# family defaults for a model no preset names: (name pattern, preset whose non-shape fields fill the gaps)
_FAMILIES = (
    (re.compile(r"llama[ _-]?3", re.I), "llama3-8b"),  # vocabulary 128256
    (re.compile(r"llama|mistral|mixtral|deepseek|yi[ _-]\d|internlm|baichuan", re.I), "llama2-7b"),
    (re.compile(r"qwen", re.I), "qwen3-30b-a3b"),  # its dense conventions (the experts are dropped)
    (re.compile(r"mpt", re.I), "mpt-125m"),  # llm-foundry benchmark configs: learned positions, biases
    (re.compile(r"nemotron", re.I), "nemotron4-340b"),
    (re.compile(r"falcon", re.I), "falcon-180b"),
    (re.compile(r"bloom", re.I), "bloom-176b"),
    (re.compile(r"\bopt\b", re.I), "opt-175b"),
    (re.compile(r"gpt[ _-]?j", re.I), "gpt-j-6b"),
    (re.compile(r"gpt|megatron", re.I), "megatron-1.7b"),
)
# conventions of a model no name places: an MLP of 4 x hidden is GPT's ungated one (GeLU, LayerNorm, learned
# positions), any other width a gated one (SwiGLU, RMSNorm, rotary: Llama and most models since 2023)
_GATED, _UNGATED, _MOE = "llama2-7b", "megatron-1.7b", "mixtral-8x7b"
_SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")


@dataclass(frozen=True)
class RowSpecs:
    model: Model
    system: System
    strategy: Strategy
    workload: Training
    assumptions: tuple[str, ...] = field(default_factory=tuple)


def int_column(row: dict[str, str], key: str) -> int | None:
    """An integer column of a row (`reading.read_int`): a number, or a number with its qualifier; None when
    empty or not led by a number. A column holding several values is refused naming the column."""
    try:
        return read_int(row, key).value
    except BadValueError as err:
        raise Unsupported(str(err)) from None


def qualified_readings(row: dict[str, str], keys: tuple[str, ...]) -> list[str]:
    """The numbers read from words around them ("ep=64 from '64 (spanning 8 nodes)'"), for the assumptions."""
    out = []
    for key in keys:
        try:
            r = read_int(row, key)
        except BadValueError:
            continue
        if r.how == "qualified":
            out.append(f"{key}={r.value} read from {r.words!r}")
    return out


def _moe_model(row: dict[str, str], preset: str | None, notes: list[str]) -> Model:
    if preset is None:
        return _moe_from_columns(row, notes)
    model = load_model(preset)
    if model.moe is None:
        raise Unsupported(f"model: the row states experts but the {preset} preset has none")
    stated = {"layers": model.layers, "hidden": model.hidden, "experts": model.moe.experts, "topk": model.moe.top_k}
    differ = [f"{k} {int_column(row, k)} vs {v}" for k, v in stated.items() if int_column(row, k) not in (None, v)]
    if differ:
        raise Unsupported(f"model: the row's architecture differs from the {preset} preset: {', '.join(differ)}")
    notes.append(f"architecture from the {preset} preset (the row states layers, hidden, experts, top-k)")
    return model


def _model(row: dict[str, str], notes: list[str]) -> Model:
    preset = model_preset_for(row.get("model"))
    if int_column(row, "experts"):
        return _moe_model(row, preset, notes)
    shape = {k: int_column(row, k) for k in _SHAPE}
    if preset is not None and all(v is None for v in shape.values()):
        notes.append(f"architecture from the {preset} preset (the row states none)")
        return load_model(preset)
    missing = [k for k in ("layers", "hidden", "heads") if shape[k] is None]
    if missing:
        raise Unsupported(f"{', '.join(missing)}: architecture columns missing (and no preset named "
                          f"{row.get('model')!r})")
    family = preset or _family(row, shape, notes)
    base = _from_columns(row, load_model(family).model_dump(), shape, family, notes)
    notes.append(f"mlp={base['mlp']}, norm={base['norm']}, position={base['position']} ({family} preset)")
    return Model.model_validate(base)


def _named_family(row: dict[str, str]) -> str | None:
    """The preset of the family the row's model name places (`_FAMILIES`); None when none does."""
    return next((p for rx, p in _FAMILIES if rx.search(row.get("model", ""))), None)


def _family(row: dict[str, str], shape: dict[str, int | None], notes: list[str]) -> str:
    """The preset whose conventions fill what the row's columns leave out: the family its name places, or
    the MLP its width implies (`_GATED`, `_UNGATED`)."""
    named = _named_family(row)
    if named is not None:
        return named
    ffn, hidden = shape["ffn"], shape["hidden"]
    if ffn is None or hidden is None:
        raise Unsupported(f"model: no preset or model family known for {row.get('model')!r}, and no ffn "
                          "column to tell its MLP")
    gated = abs(ffn / hidden - 4) > 0.01
    notes.append(f"no preset or family named: ffn / hidden = {ffn / hidden:.3g} reads as "
                 + ("a gated MLP (Llama conventions)" if gated else "GPT's 4h MLP (GPT conventions)"))
    return _GATED if gated else _UNGATED


def _from_columns(row: dict[str, str], base: dict[str, Any], shape: dict[str, int | None], family: str,
                  notes: list[str]) -> dict[str, Any]:
    """A model spec of the row's shape columns over `base`'s other fields (a family preset's), saying which
    shape fields the preset supplied."""
    filled = {k: v for k, v in shape.items() if v is not None}
    for k in _SHAPE:
        if k not in filled and k != "kv_heads":
            notes.append(f"{k}={base[k]} from the {family} preset")
    base.update(filled, name=row.get("model") or "row", head_dim=None, published=None, aliases=(),
                sources={"*": row.get("source", "")}, moe=None, mla=None)
    if "kv_heads" not in filled:
        base["kv_heads"] = filled["heads"]
        notes.append("kv_heads = heads (not stated)")
    seq = int_column(row, "seq") or 2048
    base["max_seq_len"] = max(base["max_seq_len"], seq)
    return base


def _moe_from_columns(row: dict[str, str], notes: list[str]) -> Model:
    """An MoE model no preset names, from its columns: layers, hidden, heads, experts, top-k and the expert
    width (the ffn column's number, or its 'expert N' with a 'dense N' for leading dense layers), over the
    conventions of its family or of Mixtral (SwiGLU experts, RMSNorm, rotary); shared experts and leading
    dense layers only as stated."""
    ffn_text = clean(row.get("ffn"))
    expert = re.search(r"expert\D*(\d+)", ffn_text)
    dense = re.search(r"dense\D*(\d+)", ffn_text)
    expert_ffn = int(expert.group(1)) if expert else int_column(row, "ffn")
    shape = {k: int_column(row, k) for k in _SHAPE}
    shape["ffn"] = int(dense.group(1)) if dense else expert_ffn
    needed = {"layers": shape["layers"], "hidden": shape["hidden"], "heads": shape["heads"],
              "topk": int_column(row, "topk"), "ffn (expert width)": expert_ffn}
    missing = [k for k, v in needed.items() if v is None]
    if missing:
        raise Unsupported(f"model: no mixture-of-experts preset for {row.get('model')!r} and the columns lack "
                          f"{', '.join(missing)}")
    named = _named_family(row)
    family = named if named in (_GATED, "llama3-8b", "qwen3-30b-a3b") else _MOE
    base = _from_columns(row, load_model(family).model_dump(), shape, family, notes)
    shared = re.search(r"(\d+)\s*shared", ffn_text)
    base["moe"] = {"experts": int_column(row, "experts"), "top_k": needed["topk"], "expert_ffn": expert_ffn,
                   "shared_experts": int(shared.group(1)) if shared else 0, "dense_layers": 0}
    notes.append(f"MoE architecture from the row's columns ({base['moe']['experts']} experts, top-"
                 f"{needed['topk']}, expert width {expert_ffn}; no preset named), mlp={base['mlp']}, "
                 f"norm={base['norm']}, position={base['position']} ({family} preset); "
                 f"{base['moe']['shared_experts']} shared experts, no leading dense layers (as stated)")
    return Model.model_validate(base)


def _system(row: dict[str, str], n_gpus: int, notes: list[str]) -> System:
    preset = system_preset_for(row.get("gpu"))
    if preset is None:
        raise Unsupported(f"gpu: no system preset for {row.get('gpu')!r}")
    system = load_system(preset)
    stated_gb = memory_gb_of(row.get("gpu"))
    hbm = system.device.hbm
    if stated_gb is not None and abs(stated_gb * 2**30 / hbm.capacity - 1) > 0.1:
        # "80GB" parts hold about 80 GiB: the size in the GPU's name is read as GiB, like the presets
        device = system.device.model_copy(update={"memory": (
            hbm.model_copy(update={"capacity": stated_gb * 2**30}), *system.device.memory[1:])})
        system = system.model_copy(update={"device": device})
        notes.append(f"HBM {stated_gb:g} GiB as the gpu column states (the {preset} preset has "
                     f"{hbm.capacity / 2**30:g} GiB); its peak rates kept")
    # the compute fabric only: a storage, management or front-end network named beside it is not read (the
    # NIC reading the collective rows use, collective_rows.nic_bandwidth_per_gpu)
    from armillary.validation.collective_rows import compute_network_text, nic_bandwidth_per_gpu

    inter = row.get("inter_net", "")
    per_node = search_run(r"(\d+)\s*Gbps node-node", inter)  # llm-foundry's table heading
    rate, _ = nic_bandwidth_per_gpu(compute_network_text(inter), system.devices_per_node)
    if per_node:
        gbps: float | None = float(per_node.group(1)) / system.devices_per_node
    elif rate is not None:
        gbps = rate * 8 / 1e9
    else:
        gbps = None
        notes.append(f"scale-out network not stated: {system.network[-1].name} of the {preset} preset")
    if gbps is not None:
        system = system.with_dimension(-1, bandwidth=gbps * 1e9 / 8)
    return _on_stated_fabric(system, preset, inter, gbps, notes).with_devices(n_gpus)


def _on_stated_fabric(system: System, preset: str, inter: str, gbps: float | None, notes: list[str]) -> System:
    """A stated scale-out fabric other than the InfiniBand of the preset (RoCE, EFA, Omni-Path, Pollara, TCPXO)
    on the fabric preset the collective rows are read with (`collective_rows`: one reading of a network's words
    for every kind of row); InfiniBand keeps the system preset's own calibrated tier."""
    from armillary.comm.fabrics import with_fabric
    from armillary.validation.collective_rows import compute_network_text, fabric_family, fabric_of

    family, _ = fabric_family(compute_network_text(inter))
    if family is None or family == "infiniband" or len(system.network) < 2:
        return system
    if family == "ethernet":
        notes.append(f"scale-out fabric plain Ethernet ({inter!r}): no fabric preset; the {preset} preset's tier at "
                     "the stated bandwidth")
        return system
    rate = gbps * 1e9 / 8 if gbps is not None else None
    name = fabric_of(family, compute_network_text(inter), rate, preset, False)
    notes.append(f"scale-out fabric {name} (inter_net: {family})"
                 + ("" if rate is not None else f", its NICs at the {preset} preset's rate per GPU"))
    return with_fabric(system, name, rate if rate is not None else system.network[-1].bandwidth)


def year_of(source: str) -> int | None:
    """The year a source was published: an arXiv number (2104.04473 -> 2021), else the first year named."""
    arxiv = re.search(r"arxiv:?\s*(\d{2})(\d{2})\.\d{4,5}", source, re.I)
    if arxiv:
        return 2000 + int(arxiv.group(1))
    named = re.search(r"\b(20[0-3]\d)\b", source)
    return int(named.group(1)) if named else None


def _stack(row: dict[str, str], notes: list[str]) -> SoftwareStack:
    framework = row.get("framework", "")
    stack = stack_for(framework, year_of(row.get("source", "")))
    if stack is None:
        stack = load_stack(DEFAULT_STACK)
        notes.append(f"framework {framework or 'not stated'!r}: defaults of {stack.name}")
    else:
        notes.append(f"defaults of {stack.name}")
    return stack


def global_batch(row: dict[str, str], stack: SoftwareStack, n_gpus: int, notes: list[str]) -> int | None:
    """The row's global batch; for a stack whose batch setting is per rank (torchtitan), the local batch
    times the data-parallel degree when the row states only that."""
    gbs = int_column(row, "gbs")
    local, tp, pp = int_column(row, "mbs"), int_column(row, "tp") or 1, int_column(row, "pp") or 1
    if gbs is None and stack.local_batch and local is not None:
        gbs = local * (n_gpus // (tp * (int_column(row, "cp") or 1) * pp))
        notes.append(f"gbs={gbs}: the local batch {local} on every data-parallel rank ({stack.name} accumulates "
                     "no gradients by default)")
    return gbs


def _micro_batch(row: dict[str, str], stack: SoftwareStack, dp: int, pp: int, notes: list[str]) -> int:
    mbs = int_column(row, "mbs")
    if mbs is None:
        notes.append("micro_batch=1 (not stated)")
        return 1
    if stack.local_batch and pp > 1:
        # torchtitan splits the local batch into as many micro-batches as pipeline stages by default
        micro = max(1, mbs // pp)
        notes.append(f"micro_batch={micro}: the local batch {mbs} split over {pp} pipeline stages ({stack.name})")
        return micro
    return mbs


def _devices(row: dict[str, str], n_gpus: int, gbs: int, notes: list[str]) -> int:
    """The GPUs the row's layout ran on: its n_gpus, unless its stated degrees multiply to another count and
    only the stated dp divides its global batch (a source whose GPU column and layout disagree: the layout
    that could have run is the one read; the per-GPU figures do not depend on the replicas)."""
    tp, pp, cp, dp = (int_column(row, k) for k in ("tp", "pp", "cp", "dp"))
    if tp is None or pp is None or dp is None:
        return n_gpus
    model_parallel, mbs = tp * (cp or 1) * pp, int_column(row, "mbs") or 1
    derived = n_gpus // model_parallel
    if derived == dp or gbs % (mbs * derived) == 0 or gbs % (mbs * dp) != 0:
        return n_gpus
    notes.append(f"{model_parallel * dp} GPUs: the row's tp cp pp dp, not its {n_gpus} (with dp {derived} "
                 f"micro-batches of {mbs} cannot make its global batch {gbs})")
    return model_parallel * dp


def _strategy(row: dict[str, str], n_gpus: int, stack: SoftwareStack, notes: list[str]) -> dict[str, Any]:
    tp, pp = int_column(row, "tp"), int_column(row, "pp")
    if tp is None or pp is None:
        raise Unsupported("tp, pp: parallel configuration not stated")
    cp = int_column(row, "cp") or 1
    dp = n_gpus // (tp * cp * pp)
    if int_column(row, "dp") not in (None, dp):
        notes.append(f"dp={dp} from n_gpus / (tp cp pp); the row's dp {int_column(row, 'dp')} does not multiply "
                     f"to its {n_gpus} GPUs")
    mbs = _micro_batch(row, stack, dp, pp, notes)
    out = stack.strategy_defaults(tp, hopper_or_later(row.get("gpu", "")))
    framework, other = clean(row.get("framework")), clean(row.get("other_reported"))
    sp = flag(row.get("seq_parallel"))
    if sp is None:
        notes.append(f"sequence_parallel={out['sequence_parallel']} (not stated)")
    else:
        out["sequence_parallel"] = sp and tp > 1
    precision = precision_of(row.get("precision"))
    if precision is None:
        notes.append(f"precision={out['precision'].value} ({row.get('precision') or 'not stated'})")
    else:
        out["precision"] = precision
    block = block_format_of(row.get("precision"))
    if block is not None:  # the format of a recipe's GEMMs, beside the precision its tensors are kept in
        out["block_format"] = block
        if block is not BlockFormat.MXFP8:  # Megatron's FP4 recipes: --bf16 --fp4-format e2m1 (`Strategy.block_format`)
            out["precision"] = TrainingPrecision.BF16
        notes.append(f"block_format={block.value}, precision={out['precision'].value} (the precision "
                     f"{row.get('precision')!r} names the block-scaled format)")
    if fp8_params_stated(row) and out["precision"] is TrainingPrecision.FP8:
        out["fp8_params"] = True  # needs a sharded optimizer, as the stacks that offer it have (zero >= 1)
        notes.append("fp8_params: the row says its weights were kept in fp8 (FP8 params / param gather)")
    elif out.get("fp8_params") and out["precision"] is not TrainingPrecision.FP8:
        out["fp8_params"] = False  # a stack's fp8 parameters belong to its fp8 recipe, not a row's bf16 run
    fsdp_degree = re.search(r"fsdp=(\d+)", other)
    sharding = sharding_of(framework) or (ZeroStage.PARAMETERS if fsdp_degree and int(fsdp_degree.group(1)) > 0
                                          else None)
    kept = "; ".join(about_the_run(row.get("notes", "")))
    if (sharding or out["zero"]) is ZeroStage.PARAMETERS and sharding_of(kept) is ZeroStage.GRADIENTS \
            and re.search(r"reshard", kept, re.I):
        sharding = ZeroStage.GRADIENTS  # FSDP keeping the gathered parameters from forward to backward
        notes.append("zero=2: the notes say the parameters are not resharded after the forward pass")
    if sharding is not None:
        out["zero"] = sharding
    if out["zero"] is ZeroStage.PARAMETERS and pp > 1 and re.search(r"torchtitan", stack.name, re.I):
        # torchtitan's apply_fsdp sets reshard_after_forward False when PP is on, and PyTorch's pipeline
        # schedules reduce-scatter and reshard only after the last micro-batch (torch.distributed.pipelining
        # stage.py backward_maybe_with_nosync): parameters gathered and gradients whole for the step, the
        # optimizer sharded, one gather and one reduce-scatter per step: ZeRO-1
        out["zero"] = ZeroStage.OPTIMIZER
        notes.append(f"zero=1: {stack.name} keeps FSDP's parameters gathered and gradients unsharded across the "
                     "micro-batches of a pipeline (reshard_after_forward off under PP)")
    if re.search(r"tp-comm-overlap|tp comm overlap|async ?tp|collective matmul", f"{framework} "
                 f"{clean(row.get('notes'))}") and tp > 1:
        out["overlap"]["tp_comm"] = True
    notes.append(f"attention={out['attention'].value}, zero={int(out['zero'])}, overlapped: "
                 + (", ".join(k for k, v in out["overlap"].items() if v) or "nothing"))
    moe: dict[str, Any] = {}
    if int_column(row, "experts"):
        moe = dict(ep=int_column(row, "ep") or 1, expert_tp=1)
        notes.append("expert_tp=1, balanced routing (the benchmarks force-balance the tokens)")
        if deduplicated_dispatch(f"{framework} {clean(row.get('notes'))}"):
            moe["routing"] = {"dispatch_dedup": True}
            notes.append("dispatch_dedup (the row names DeepEP / HybridEP: one copy per node and device)")
    vpp = int_column(row, "vpp")
    if vpp is None and re.search(r"interleav", clean(row.get("vpp"))):
        notes.append(f"vpp=1: the row says {row.get('vpp')!r} without the chunks per stage (the bubble of an "
                     "interleaved schedule is overstated)")
    return dict(**out, **moe, tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp or 1, micro_batch=mbs)


def _pipeline_layout(row: dict[str, str], stack: SoftwareStack, pp: int, vpp: int, mtp_depth: int,
                     notes: list[str]) -> str | None:
    """The row's pipeline layout (`Strategy.pipeline_layout`): the one its words state, else the one its stack's
    recipe sets for its model preset on pp x vpp chunks with the row's multi-token-prediction modules
    (`SoftwareStack.pipeline_layouts`); None when neither (the generic uneven split,
    `plan.layout.embedding_and_loss_split`)."""
    stated = pipeline_layout_of(f"{row.get('other_reported', '')} {row.get('notes', '')}")
    if stated is not None:
        try:
            layout_stage_layers(stated, pp, vpp)
        except ValueError as err:
            raise Unsupported(str(err)) from None
        notes.append(f"pipeline_layout {stated!r} (the row states it)")
        return stated
    preset = model_preset_for(row.get("model"))
    entry = stack.recipe_layout(preset, pp, vpp) if preset is not None else None
    if entry is None:
        return None
    layout = entry.with_mtp(mtp_depth)
    first, last = layout_stage_layers(layout, pp, vpp)
    notes.append(f"pipeline_layout {layout!r}: the layout {stack.name} sets for {preset} on pp {pp} x vpp {vpp} "
                 f"({entry.source}), first / last stage {first} / {last} layers")
    return layout


# module recompute of the MoE recipes (Megatron MoE model zoo, Qwen3 and DeepSeek-V3 best practice on H100:
# "norm, act", plus MLA's up-projections for DeepSeek)
_MOE_MODULES = ("core_attn", "layernorm", "moe_act")


def _recompute_choices(row: dict[str, str], model: Model, stack: SoftwareStack, chunk: int,
                       notes: list[str]) -> list[dict[str, Any]]:
    """The recomputation the row states or its stack sets; else every choice from the least to the most:
    none, selective, the MoE recipes' modules, full recomputation of the first 1, 2, ... layers of each model
    chunk of `chunk` layers (Megatron's block method, which NVIDIA's recipes use: recompute_num_layers), all."""
    stated_choice = recompute_of(row.get("recompute")) or stack.recompute
    if stated_choice is not None:
        named = recompute_modules_of(row.get("recompute"))
        if stated_choice is Recompute.SELECTIVE and named is not None:
            notes.append("selective recomputation of the modules the row names: " + ", ".join(m.value for m in named))
            return [{"recompute": "selective", "recompute_modules": named}]
        if stated_choice is Recompute.SELECTIVE and stack.selective_modules is not None:
            notes.append(f"selective recomputation as {stack.name} does it: "
                         + ", ".join(m.value for m in stack.selective_modules))
            return [{"recompute": "selective", "recompute_modules": stack.selective_modules}]
        return [{"recompute": stated_choice}]
    offered = stack.recompute_modes or tuple(Recompute)
    notes.append("recompute not stated: the least recomputation that fits memory"
                 + ("" if stack.recompute_modes is None else
                    f" of those {stack.name} offered ({', '.join(m.value for m in offered)})"))
    choices: list[dict[str, Any]] = [{"recompute": "none"}, {"recompute": "selective"}]
    if model.moe is not None:
        modules = _MOE_MODULES + (("mla_up_proj",) if model.mla is not None else ())
        choices.append({"recompute": "selective", "recompute_modules": modules})
    partial = [{"recompute": "full", "recompute_layers": n} for n in range(1, chunk)] \
        if stack.recompute_modes is None else []  # the block method arrived with selective recomputation
    return [c for c in (*choices, *partial, {"recompute": "full"}) if Recompute(c["recompute"]) in offered]


def _mtp(row: dict[str, str], model: Model, notes: list[str]) -> bool:
    """Whether the row trains the model's multi-token-prediction modules: as its model text says ("w/ MTP",
    "w/o MTP": `vocabulary.mtp_of`); a row that says nothing trains none (as before MTP was modelled)."""
    said = mtp_of(row.get("model"))
    if said is None:
        return False
    if said and not model.mtp_layers:
        raise Unsupported(f"model: the row trains multi-token prediction ({row.get('model')!r}) but {model.name} "
                          "has no MTP modules (mtp_layers 0)")
    notes.append(f"MTP depth {model.mtp_layers} trained on the last stage (the model text says so)" if said
                 else "MTP modules not trained (the model text says so)")
    return said


def _finetune(row: dict[str, str], notes: list[str]) -> Lora | None:
    """LoRA / QLoRA fine-tuning where the model or framework says so: the rank from the row's words
    ("LoRA rank 16"; refused when not stated), the adapters on the attention projections (MLPerf Llama 2
    70B LoRA: its reference adapts qkv_proj and o_proj, NVIDIA's NeMo submissions target_modules
    ['attention'], fused linear_qkv and linear_proj), the frozen base in 4-bit NF4 for QLoRA, in fp8 where
    the row's precision has FP8 (MLPerf's NeMo LoRA keeps the frozen base as fp8 parameters), else bf16."""
    named = clean(f"{row.get('model')} {row.get('framework')}")
    kind = re.search(r"\b(q?lora)\b", named, re.IGNORECASE)
    if kind is None:
        return None
    text = f"{named} {clean(row.get('notes'))}"
    ranks = {int(r) for r in re.findall(r"\b(?:lora\s+)?rank\s*(?:r\s*=\s*|=\s*|of\s+)?(\d+)", text, re.IGNORECASE)}
    if len(ranks) != 1:
        raise Unsupported("model: a LoRA row must state one adapter rank ('LoRA rank 16'); "
                          + ("none stated" if not ranks else f"several: {sorted(ranks)}"))
    rank = ranks.pop()
    qlora = re.search(r"\bqlora\b", named, re.IGNORECASE) is not None  # "finetune/lora.py: QLoRA" is QLoRA
    precision = clean(row.get("precision")).lower()
    base = BasePrecision.NF4 if qlora else BasePrecision.FP8 if "fp8" in precision else BasePrecision.BF16
    named_targets = _lora_targets(text)
    targets = ("adapters on q, k, v, o (fused QKV; MLPerf Llama 2 70B LoRA's targets, not stated by the row)"
               if named_targets is None else
               f"adapters on {', '.join(t.value for t in named_targets)} (read from the row; one per projection)")
    notes.append(f"{'QLoRA' if qlora else 'LoRA'} rank {rank} (read from the row), {targets}, frozen base {base.value}"
                 + (" (the row's precision has FP8: NeMo's fp8 parameters)" if base is BasePrecision.FP8 else "")
                 + "; every sample priced as one sequence of the row's seq tokens (MLPerf pads / packs GovReport "
                   "to max_seq_length)")
    dropout = _lora_dropout(named)
    if dropout:
        notes.append(f"LoRA dropout {dropout:g} (read from the row: its mask and dropped input kept for backward)")
    if named_targets is None:
        return Lora(rank=rank, base_precision=base, dropout=dropout)
    return Lora(rank=rank, base_precision=base, target_modules=named_targets, fused=False, dropout=dropout)


def _lora_dropout(text: str) -> float:
    """The adapters' dropout probability the model or framework column states ("lora_r 8, alpha 16, dropout
    0.05", "lora_dropout=0.1"); 0 when none is stated (PEFT's and NeMo's default)."""
    found = re.search(r"\b(?:lora_)?dropout\s*(?:=|:|\bp\b)?\s*(\d*\.?\d+)", text, re.IGNORECASE)
    return float(found.group(1)) if found and float(found.group(1)) < 1 else 0.0


# the words a row uses for LoRA's target layers ("LoRA rank 8 on query and value"; LitGPT's lora_query, ...;
# PEFT's q_proj, ...), in Hugging Face PEFT's names
_LORA_TARGETS = ((LoraTarget.Q, r"query|q_proj"), (LoraTarget.K, r"key|k_proj"), (LoraTarget.V, r"value|v_proj"),
                 (LoraTarget.O, r"projection|o_proj|output projection"), (LoraTarget.GATE, r"gate|gate_proj"),
                 (LoraTarget.UP, r"up_proj|fc1"), (LoraTarget.DOWN, r"down_proj|fc2"))


def _lora_targets(text: str) -> tuple[LoraTarget, ...] | None:
    """The adapted layers a row names after 'on' ("rank 8 on query and value"); None when it names none."""
    found = re.search(r"rank\s*\d+\s+on\s+([^;(,.]*)", text, re.IGNORECASE)
    if found is None:
        return None
    named = tuple(t for t, words in _LORA_TARGETS if re.search(rf"\b(?:{words})\b", found.group(1), re.IGNORECASE))
    return named or None


def row_specs(row: dict[str, str]) -> list[RowSpecs]:
    """Candidate specifications for a row (several when recomputation is not stated, least first)."""
    n_gpus = int_column(row, "n_gpus")
    if n_gpus is None:
        raise Unsupported("n_gpus: not stated")
    notes: list[str] = []
    finetune = _finetune(row, notes)
    stack = _stack(row, notes)
    seq, gbs = int_column(row, "seq"), global_batch(row, stack, n_gpus, notes)
    if seq is None and stack.seq_len is not None:
        seq = stack.seq_len
        notes.append(f"seq={seq}: the default of {stack.name} training configs (not stated)")
    if seq is None or gbs is None:
        raise Unsupported(f"{'seq' if seq is None else 'gbs'}: not stated")
    n_gpus = _devices(row, n_gpus, gbs, notes)
    model = _model(row, notes)
    system = _system(row, n_gpus, notes)
    strategy = _strategy(row, n_gpus, stack, notes)
    mtp = _mtp(row, model, notes)
    layout = _pipeline_layout(row, stack, strategy["pp"], strategy["vpp"], model.mtp_layers if mtp else 0, notes)
    uneven = None if layout is not None else embedding_and_loss_split(model.layers, strategy["pp"], strategy["vpp"])
    if layout is not None:
        strategy["pipeline_layout"] = layout
    elif uneven is not None:
        strategy.update(first_stage_layers=uneven[0], last_stage_layers=uneven[1])
        notes.append(f"{model.layers} layers do not fill pp x vpp = {strategy['pp'] * strategy['vpp']} equal chunks: "
                     f"the embedding and loss stand in for layers (Megatron-Core's uneven layout), first / last "
                     f"stage {uneven[0]} / {uneven[1]} layers")
    notes.extend(qualified_readings(row, ("n_gpus", "seq", "gbs", "mbs", "tp", "pp", "dp", "cp", "ep", "vpp", *_SHAPE,
                                          "experts", "topk")))
    workload = Training(seq_len=seq, global_batch=gbs, finetune=finetune, mtp=mtp)
    chunk = int(chunk_size(model.layers, Strategy.model_validate(strategy)))
    out = []
    for recompute in _recompute_choices(row, model, stack, chunk, notes):
        st = Strategy.model_validate({**strategy, **recompute})
        described = ", ".join(f"{k}={'+'.join(v) if isinstance(v, tuple) else v}" for k, v in recompute.items())
        out.append(RowSpecs(model, system, st, workload, (*notes, described)))
    return out
