"""A training row's parallel layout: its global and micro-batch, the GPUs its stated degrees ran on, and its
pipeline layout (stated, or the one its stack's recipe sets)."""

from __future__ import annotations

from armillary.specs.pipeline_layout import layout_stage_layers
from armillary.specs.stack import RecipeSettings, SoftwareStack
from armillary.validation.model_words import model_preset_for
from armillary.validation.row_columns import Unsupported, int_column
from armillary.validation.strategy_words import pipeline_layout_of


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


def read_micro_batch(row: dict[str, str], stack: SoftwareStack, dp: int, pp: int, notes: list[str],
                     model_parallel: int = 1) -> int:
    """The row's micro-batch: its mbs, a local batch split over the pipeline stages (torchtitan), or a
    per-device batch times the tp x cp devices that share each data-parallel rank's batch (MaxText)."""
    mbs = int_column(row, "mbs")
    if mbs is None:
        notes.append("micro_batch=1 (not stated)")
        return 1
    if stack.device_batch and pp == 1 and model_parallel > 1:
        # MaxText pyconfig.calculate_global_batch_sizes: the batch trained on is per_device_batch_size x every
        # device (x gradient_accumulation_steps, 1 by default); base.yml shards activation_batch over the
        # data, fsdp, fsdp_transpose and expert axes only, so the tensor and sequence axes share each sequence
        micro = mbs * model_parallel
        notes.append(f"micro_batch={micro}: the per-device batch {mbs} times the {model_parallel} tensor/context-"
                     f"parallel devices of each data-parallel rank ({stack.name} counts its batch per device)")
        return micro
    if stack.local_batch and pp > 1:
        # torchtitan splits the local batch into as many micro-batches as pipeline stages by default
        micro = max(1, mbs // pp)
        notes.append(f"micro_batch={micro}: the local batch {mbs} split over {pp} pipeline stages ({stack.name})")
        return micro
    return mbs


def read_devices(row: dict[str, str], n_gpus: int, gbs: int, notes: list[str]) -> int:
    """The GPUs the row's layout ran on: its n_gpus, unless its stated degrees multiply to another count and
    only the stated dp divides its global batch (a source whose GPU column and layout disagree: the layout
    that could have run is the one read; the per-GPU figures do not depend on the replicas)."""
    tp, pp, cp, dp = (int_column(row, k) for k in ("tp", "pp", "cp", "dp"))
    if tp is None or pp is None or dp is None:
        return n_gpus
    model_parallel, mbs = tp * (cp or 1) * pp, int_column(row, "mbs") or 1
    derived = n_gpus // model_parallel
    if derived == 0:
        raise Unsupported(f"n_gpus: {n_gpus} GPUs cannot hold one replica of tp x cp x pp = {model_parallel}")
    if derived == dp or gbs % (mbs * derived) == 0 or gbs % (mbs * dp) != 0:
        return n_gpus
    notes.append(f"{model_parallel * dp} GPUs: the row's tp cp pp dp, not its {n_gpus} (with dp {derived} "
                 f"micro-batches of {mbs} cannot make its global batch {gbs})")
    return model_parallel * dp


def read_pipeline_layout(row: dict[str, str], stack: SoftwareStack, pp: int, vpp: int, mtp_depth: int,
                         notes: list[str], recipe: RecipeSettings | None = None) -> str | None:
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
    passed = recipe.with_mtp(mtp_depth) if recipe is not None else None
    if passed is not None:  # the layout the recipe passes for the row's GPU (`RecipeSettings.layout`)
        try:
            first, last = layout_stage_layers(passed, pp, vpp)
        except ValueError as err:
            notes.append(f"the recipe's layout {passed!r} does not fit pp {pp} x vpp {vpp} ({err}): not used")
        else:
            notes.append(f"pipeline_layout {passed!r}: the layout {stack.name}'s recipe passes for this model, GPU "
                         f"and release ({recipe.source if recipe is not None else ''}), first / last stage "
                         f"{first} / {last} layers")
            return passed
    preset = model_preset_for(row.get("model"))
    entry = stack.recipe_layout(preset, pp, vpp) if preset is not None else None
    if entry is None:
        return None
    layout = entry.with_mtp(mtp_depth)
    first, last = layout_stage_layers(layout, pp, vpp)
    notes.append(f"pipeline_layout {layout!r}: the layout {stack.name} sets for {preset} on pp {pp} x vpp {vpp} "
                 f"({entry.source}), first / last stage {first} / {last} layers")
    return layout
