"""Megatron-Core's pipeline layout strings (`--pipeline-model-parallel-layout`): which model chunk holds the
embedding, which transformer layers, the multi-token-prediction modules and the loss (`Strategy.pipeline_layout`)."""

from __future__ import annotations

import re

_REPEAT_GROUP, _REPEAT_ONE = re.compile(r"\(([^()]*)\)\*(\d+)"), re.compile(r"([^()|*])\*(\d+)")


def pipeline_chunks(layout: str) -> list[str]:
    """The model chunks of a Megatron-Core pipeline layout string, in layer order: commas dropped, `(..)*n` and
    `x*n` repeated, split at '|' (megatron/core/transformer/pipeline_parallel_layer_layout.py
    `parse_str_to_list`); each chunk a string of 'E' (embedding), 't' (transformer layer), 'm' (a multi-token-
    prediction module), 'L' (loss)."""
    text = layout.replace(",", "").replace(" ", "")
    while (unrolled := _REPEAT_GROUP.sub(lambda g: g.group(1) * int(g.group(2)), text)) != text:
        text = unrolled
    text = _REPEAT_ONE.sub(lambda g: g.group(1) * int(g.group(2)), text)
    chunks = text.split("|")
    unknown = sorted(set(text) - set("EtmL|"))
    if unknown:
        raise ValueError(f"pipeline_layout {layout!r}: unknown layer characters {unknown}; allowed: 'E' embedding, "
                         "'t' transformer layer, 'm' multi-token-prediction module, 'L' loss, '|' between chunks, "
                         "(..)*n and x*n repeats")
    return chunks


def layout_stage_layers(layout: str, pp: int, vpp: int) -> tuple[int | None, int | None]:
    """(first, last) stage transformer layers of a pipeline layout on pp ranks with vpp chunks each (None, None
    where every stage holds the same), after Megatron-Core's checks (`PipelineParallelLayerLayout`): pp x vpp
    chunks, the embedding first in the first chunk and the loss last in the last, each once. The estimator
    prices a first, a last and equal middle stages (`Strategy.first_stage_layers`), so middle stages that
    differ are refused."""
    chunks = pipeline_chunks(layout)
    if len(chunks) != pp * vpp:
        raise ValueError(f"pipeline_layout {layout!r}: {len(chunks)} chunks, but pp x vpp = {pp} x {vpp} = "
                         f"{pp * vpp} model chunks")
    flat = "".join(chunks)
    if flat.count("E") != 1 or not chunks[0].startswith("E"):
        raise ValueError(f"pipeline_layout {layout!r}: the embedding 'E' must come once, first in the first chunk")
    if flat.count("L") != 1 or not chunks[-1].endswith("L"):
        raise ValueError(f"pipeline_layout {layout!r}: the loss 'L' must come once, last in the last chunk")
    mtp = flat.count("m")
    if mtp and not chunks[-1].endswith("m" * mtp + "L"):
        raise ValueError(f"pipeline_layout {layout!r}: the multi-token-prediction modules 'm' must come together "
                         "at the end of the last chunk, before the loss 'L' (the estimator places them on the last "
                         "stage, as Megatron-Core runs them after the decoder)")
    stages = [sum(chunk.count("t") for chunk in chunks[rank::pp]) for rank in range(pp)]
    if min(stages) < 1:
        raise ValueError(f"pipeline_layout {layout!r}: pipeline rank {stages.index(min(stages))} holds no "
                         "transformer layer")
    middle = set(stages[1:-1])
    if len(middle) > 1:
        raise ValueError(f"pipeline_layout {layout!r}: the stages between the first and the last hold "
                         f"{sorted(middle)} layers; the estimator prices a first, a last and equal middle stages")
    if len(set(stages)) == 1:
        return None, None
    return stages[0], stages[-1]


def layout_mtp(layout: str) -> int:
    """Multi-token-prediction modules ('m') of a pipeline layout: what must equal the depth the run trains
    (Megatron-Core's layout holds one 'm' per `--mtp-num-layers`)."""
    return sum(chunk.count("m") for chunk in pipeline_chunks(layout))


def layout_layers(layout: str) -> int:
    """Transformer layers of a pipeline layout: what must equal the model's layers (Megatron-Core's
    `validate_layer_layout`: the decoder layers of the layout match num_layers)."""
    return sum(chunk.count("t") for chunk in pipeline_chunks(layout))
