"""A training row's strategy fields: its parallel degrees, and what its software stack sets that the row does not
state (precision, sharding, overlap, experts). The stack and its recipe are read by `row_stack`, the
recomputation by `row_recompute`."""

from __future__ import annotations

import re
from typing import Any

from armillary.specs.stack import SoftwareStack, hopper_or_later
from armillary.specs.strategy import BlockFormat, TrainingPrecision, ZeroStage
from armillary.validation.precision_words import block_format_of, precision_of
from armillary.validation.reading import about_the_run, fp8_params_stated
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.row_layout import read_micro_batch
from armillary.validation.row_stack import apply_dense_recipe, apply_moe_recipe, recipe_of, stated_fsdp
from armillary.validation.strategy_words import deduplicated_dispatch, sharding_of
from armillary.validation.vocabulary import clean, flag


def read_strategy(row: dict[str, str], n_gpus: int, stack: SoftwareStack, notes: list[str]) -> dict[str, Any]:
    """The row's strategy fields: its parallel degrees, and what its stack sets that the row does not state."""
    tp, pp, cp, dp = _degrees(row, n_gpus, notes)
    mbs = read_micro_batch(row, stack, dp, pp, notes, tp * cp)
    out = stack.strategy_defaults(tp, hopper_or_later(row.get("gpu", "")))
    _read_sequence_parallel(row, tp, out, notes)
    _read_precision(row, out, notes)
    _read_sharding(row, pp, stack, out, notes)
    if re.search(r"tp-comm-overlap|tp comm overlap|async ?tp|collective matmul", _framework_and_notes(row)) \
            and tp > 1:
        out["overlap"]["tp_comm"] = True
    notes.append(f"attention={out['attention'].value}, zero={int(out['zero'])}, overlapped: "
                 + (", ".join(k for k, v in out["overlap"].items() if v) or "nothing"))
    moe = _read_experts(row, stack, out, notes)
    if moe.get("ep", 1) > 1 and (tp * cp * dp) % moe["ep"]:
        # Megatron-Core's expert layout: the ep (x etp) ranks of an expert group divide the tp x cp x dp ranks of
        # a pipeline stage (parallel_state.initialize_model_parallel)
        raise Unsupported(f"ep: {moe['ep']} does not divide the tp x cp x dp = {tp * cp * dp} ranks of a pipeline "
                          "stage")
    vpp = int_column(row, "vpp")
    if vpp is None and re.search(r"interleav", clean(row.get("vpp"))):
        notes.append(f"vpp=1: the row says {row.get('vpp')!r} without the chunks per stage (the bubble of an "
                     "interleaved schedule is overstated)")
    return dict(**out, **moe, tp=tp, pp=pp, cp=cp, dp=dp, vpp=vpp or 1, micro_batch=mbs)


def _framework_and_notes(row: dict[str, str]) -> str:
    """The row's framework and notes columns, cleaned, where a setting may be named."""
    return f"{clean(row.get('framework'))} {clean(row.get('notes'))}"


def _degrees(row: dict[str, str], n_gpus: int, notes: list[str]) -> tuple[int, int, int, int]:
    """(tp, pp, cp, dp): the stated degrees, dp the GPUs over one replica's tp x cp x pp."""
    tp, pp = int_column(row, "tp"), int_column(row, "pp")
    if tp is None or pp is None:
        raise Unsupported("tp, pp: parallel configuration not stated")
    cp = int_column(row, "cp") or 1
    dp = n_gpus // (tp * cp * pp)
    if dp == 0:
        raise Unsupported(f"n_gpus: {n_gpus} GPUs cannot hold one replica of tp x cp x pp = {tp * cp * pp}")
    # degrees that do not multiply to the GPUs: one of the columns is misread or misprinted, which one the row
    # does not say; read (dp from the GPUs) only where the row's notes record the source's inconsistency
    flagged = re.search(r"inconsisten", row.get("notes", ""), re.I) is not None
    if n_gpus % (tp * cp * pp) and not flagged:
        raise Unsupported(f"n_gpus / tp / cp / pp: {n_gpus} GPUs are not a whole number of replicas of tp x cp x pp = "
                          f"{tp * cp * pp}")
    if int_column(row, "dp") not in (None, dp) and not flagged:
        raise Unsupported(f"dp / n_gpus: tp x cp x pp x dp = {tp * cp * pp * (int_column(row, 'dp') or 0)} is not "
                          f"the row's {n_gpus} GPUs (a source's inconsistency is read only where the notes record it)")
    if int_column(row, "dp") not in (None, dp):
        notes.append(f"dp={dp} from n_gpus / (tp cp pp); the row's dp {int_column(row, 'dp')} does not multiply "
                     f"to its {n_gpus} GPUs")
    return tp, pp, cp, dp


def _read_sequence_parallel(row: dict[str, str], tp: int, out: dict[str, Any], notes: list[str]) -> None:
    """Megatron's sequence parallelism as the row states it (on only with tp > 1), else the stack's."""
    if re.search(r"ulysses|ring[- ]?attention|context[- ]parallel", clean(row.get("seq_parallel"))):
        # DeepSpeed-Ulysses and ring attention split the sequence across ranks for attention: context
        # parallelism (Strategy.cp), not Megatron's sequence parallelism of the TP region's norms and dropout
        raise Unsupported(f"seq_parallel: {row.get('seq_parallel')!r} names context parallelism (Ulysses / ring "
                          "attention), not Megatron's sequence parallelism; the row needs it as cp")
    sp = flag(row.get("seq_parallel"))
    if sp is None:
        notes.append(f"sequence_parallel={out['sequence_parallel']} (not stated)")
    else:
        out["sequence_parallel"] = sp and tp > 1


def _read_precision(row: dict[str, str], out: dict[str, Any], notes: list[str]) -> None:
    """The precision recipe the row states (its GEMMs' block format, fp8 weights), else the stack's."""
    if re.search(r"\bfp4\b|\be2m1\b", clean(row.get("precision"))) and block_format_of(row.get("precision")) is None:
        # "FP4" alone: NVFP4 (16-element blocks, E4M3 scales) or MXFP4 (32-element, E8M0 scales) is not said
        raise Unsupported(f"precision: {row.get('precision')!r} names FP4 without its block format (NVFP4 or MXFP4)")
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


def _read_sharding(row: dict[str, str], pp: int, stack: SoftwareStack, out: dict[str, Any],
                   notes: list[str]) -> None:
    """The data-parallel sharding (ZeRO stage) the row's framework or table names, as its stack runs it."""
    sharding = sharding_of(clean(row.get("framework"))) or (ZeroStage.PARAMETERS if stated_fsdp(row) else None)
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


def _read_experts(row: dict[str, str], stack: SoftwareStack, out: dict[str, Any],
                  notes: list[str]) -> dict[str, Any]:
    """An MoE row's expert fields (ep, expert_tp, routing) and what its stack's recipe sets for its MoE layers;
    a dense row's recipe noted. Empty for a dense row."""
    moe: dict[str, Any] = {}
    if int_column(row, "experts"):
        etp = re.search(r"\b(?:etp|expert[-_ ]tensor[-_ ]parallel(?:ism)?|expert[-_ ]tp)\b\s*[=:]?\s*(\d+)",
                        row.get("ep", ""), re.I)
        if etp and int(etp.group(1)) != 1:  # Megatron-Bridge 26.x's ETP column written beside the ep
            raise Unsupported(f"ep: {row.get('ep')!r} names an expert tensor-parallel degree; the row is read with "
                              "expert_tp=1 (ETP 1), as the benchmarks run")
        moe = dict(ep=int_column(row, "ep") or 1, expert_tp=1)
        notes.append("expert_tp=1, balanced routing (the benchmarks force-balance the tokens)")
        if deduplicated_dispatch(_framework_and_notes(row)):
            moe["routing"] = {"dispatch_dedup": True}
            notes.append("dispatch_dedup (the row names DeepEP / HybridEP: one copy per node and device)")
        recipe = recipe_of(row, stack)
        if recipe is not None:
            apply_moe_recipe(recipe, stack, out, moe, notes)
    elif (recipe := recipe_of(row, stack)) is not None:
        apply_dense_recipe(recipe, stack, out, notes)
    return moe
