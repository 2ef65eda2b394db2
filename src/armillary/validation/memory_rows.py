"""Memory rows: a training configuration's measured peak memory per GPU against the memory model.

A memory row (`kind` memory, `validation/data/memory.csv`) is a training row of the shared format whose
`metric` is a peak memory per GPU. Its configuration is read exactly as a training row's (`rows.row_specs`,
the same choice of recomputation where none is stated: `run.choose_candidate`); the figure compared is the
one the source measured:
- allocated (`torch.cuda.max_memory_allocated`): the model's tensors, nothing of the runtime's allowance;
- reserved (`torch.cuda.max_memory_reserved`): the tensors plus what the caching allocator holds beyond
  them (`Strategy.fragmentation` of the tensors), never the CUDA context, NCCL and library buffers outside
  the allocator (the runtime reserve: `Device.memory_reserve`, or `Strategy.memory_reserve` where set).
The allowance stays explicit: what each figure includes is the breakdown's, named in the row's notes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

from armillary.estimate.memory import runtime_reserve
from armillary.estimate.result import MemoryBreakdown, StepEstimate
from armillary.plan.arrays import StrategyArrays
from armillary.specs.model import PositionKind
from armillary.specs.strategy import Strategy
from armillary.validation.reading import eager_fp32_loss_stated, search_run
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import RowSpecs

MEMORY_CSV = Path(str(resources.files("armillary.validation") / "data" / "memory.csv"))
# bytes of each unit a memory row may state, spelled as published
_UNITS = {"gib": 2**30, "gb": 1e9, "mib": 2**20, "mb": 1e6}
_SPELLED = {"gibibytes": "gib", "gigabytes": "gb", "mebibytes": "mib", "megabytes": "mb"}
ALLOCATED, RESERVED = "allocated", "reserved"


def is_memory_row(row: dict[str, str]) -> bool:
    """A row whose figure is a memory per GPU: kind memory."""
    return row.get("kind", "").strip().lower() == "memory"


def measure_of(row: dict[str, str]) -> str:
    """What the row's memory figure counts: allocated or reserved (the metric names it)."""
    metric = row.get("metric", "").lower()
    # nvidia-smi's "memory used" counts the whole process: the CUDA context, NCCL and library buffers outside the
    # allocator too; neither torch figure
    if re.search(r"nvidia-smi|cuda context|\bnvml\b|rocm-smi", metric):
        raise Unsupported(f"metric: a memory row must say 'allocated' or 'reserved' (torch.cuda.max_memory_*); "
                          f"{row.get('metric')!r} is the whole process's use (CUDA context and buffers included)")
    # torchtune's log names torch.cuda.max_memory_allocated "peak_memory_alloc" (training/memory.py get_memory_stats)
    metric = re.sub(r"(?<![a-z])alloc\b", ALLOCATED, metric)
    found = {m for m in (ALLOCATED, RESERVED) if m in metric}
    if len(found) != 1:
        raise Unsupported(f"metric: a memory row must say 'allocated' or 'reserved', got {row.get('metric')!r}")
    return found.pop()


def unit_bytes(row: dict[str, str]) -> float:
    """Bytes per unit of the row's value: GiB, GB, MiB or MB exactly as published."""
    # "GiB per GPU", "GB/GPU": the figure is per GPU already (a memory row's); any other qualifier is refused
    unit = re.sub(r"\s*(per|/)\s*(gpu|device|rank)\b", "", row.get("unit", "").strip().lower()).strip()
    unit = _SPELLED.get(unit, unit)
    # "Gb" / "Mb" with a capital and a small b are bits (IEC 80000-13), never a memory's bytes
    if unit not in _UNITS or re.search(r"[GM]i?b\b", row.get("unit", "")):
        raise Unsupported(f"unit: expected one of GiB, GB, MiB, MB for a memory row, got {row.get('unit')!r}")
    return _UNITS[unit]


def compared_bytes(hbm: MemoryBreakdown, reserve: float, measure: str) -> float:
    """The bytes of the estimate's HBM breakdown that a measurement of `measure` sees: the tensors
    (allocated), or the tensors and the allocator's fragmentation, which is the runtime allowance less the
    reserve held outside the allocator (reserved)."""
    tensors = float(hbm.total) - float(hbm.runtime)
    return tensors if measure == ALLOCATED else float(hbm.total) - reserve


def stated_loss(row: dict[str, str], candidates: list[RowSpecs]) -> list[RowSpecs]:
    """The row's configurations with the loss kernel its words name (`reading.eager_fp32_loss_stated`): an
    eager fp32 cross-entropy keeps 12 bytes per logit (`activations.logit_bytes`). The training rows' reading
    (`rows.row_specs`) does not read it: their step times do not depend on it."""
    if not eager_fp32_loss_stated(row):
        return candidates
    return [replace(c, strategy=Strategy.model_validate({**c.strategy.model_dump(), "cross_entropy": "eager_fp32"}),
                    assumptions=(*c.assumptions, "cross_entropy=eager_fp32 (the row's notes)")) for c in candidates]


def eager_kernels_stated(row: dict[str, str]) -> bool:
    """Whether the row says its layers ran as eager PyTorch (`Strategy.activation_kernels` eager: autograd op
    by op, `activations.eager_activations`), in its words 'Eager PyTorch' in a clause about the run (the LitGPT
    rows: no torch.compile, no fused kernels). torchtitan's '(eager)', without torch.compile, is not read:
    its model code differs (separate wq / wk / wv; its selective checkpointing recomputes the element-wise
    ops) and is not what `eager_activations` was read from."""
    text = "; ".join(row.get(column, "") for column in ("framework", "notes"))
    return search_run(r"\beager pytorch\b", text) is not None


def stated_kernels(row: dict[str, str], candidates: list[RowSpecs]) -> list[RowSpecs]:
    """The row's configurations with eager activation kernels where its words say so
    (`eager_kernels_stated`); like the loss, the training rows' reading does not read it."""
    if not eager_kernels_stated(row):
        return candidates
    return [replace(c, strategy=Strategy.model_validate({**c.strategy.model_dump(), "activation_kernels": "eager"}),
                    assumptions=(*c.assumptions, "activation_kernels=eager (the row's notes)")) for c in candidates]


def stated_positions(row: dict[str, str], candidates: list[RowSpecs]) -> list[RowSpecs]:
    """The row's configurations with rotary positions where its words say the model uses 'partial rotary
    positions' (LitGPT's phi-1.5 and StableLM Alpha: its config.py's rotary percentage; the rows name no preset,
    so the harness would give them GPT's learned positions). Rotary positions are priced whole: partial rotary
    keeps as much (`activations.eager_activations`: the cat copies the whole head)."""
    text = "; ".join(row.get(column, "") for column in ("framework", "notes"))
    if search_run(r"\bpartial rotary positions\b", text) is None:
        return candidates
    return [replace(c, model=c.model.model_copy(update={"position": PositionKind.ROTARY}),
                    assumptions=(*c.assumptions, "position=rotary (the row's notes: partial rotary)"))
            for c in candidates]


def stated_head(row: dict[str, str], candidates: list[RowSpecs]) -> list[RowSpecs]:
    """The row's configurations with an LM head of its own where its words say it is not tied to the embedding
    (LitGPT's GPT: `lm_head` an nn.Linear beside `transformer.wte`). The rows name no preset for phi-1.5 or
    StableLM Alpha, so the harness would give them GPT's tied embedding (`row_model._family`); the training rows'
    step times hardly depend on it, their memory does (a second vocabulary x hidden matrix)."""
    text = "; ".join(row.get(column, "") for column in ("framework", "notes"))
    if search_run(r"\bnot tied to the embedding\b", text) is None:
        return candidates
    return [replace(c, model=c.model.model_copy(update={"tied_embeddings": False}),
                    assumptions=(*c.assumptions, "tied_embeddings=False (the row's notes: its own LM head)"))
            for c in candidates]


def reserve_of(specs: RowSpecs) -> float:
    """The runtime reserve the estimate of `specs` held outside the tensors: the strategy's, else its device's."""
    coded = StrategyArrays.of(specs.strategy, 1)
    return float(runtime_reserve(coded, specs.system.device.memory_reserve))


@dataclass(frozen=True)
class MemoryPrediction:
    label: str  # "peak memory allocated per GPU" or "... reserved ..."
    predicted: float  # in the row's unit
    notes: tuple[str, ...]
    feasible: bool


def predict_memory(row: dict[str, str]) -> MemoryPrediction:
    """The memory model's figure for a memory row, in the row's unit, with what it assumed."""
    from armillary.validation.rows import row_specs
    from armillary.validation.run import choose_candidate

    measure, scale = measure_of(row), unit_bytes(row)
    result, chosen = choose_candidate(stated_head(row, stated_positions(row, stated_kernels(row, stated_loss(
        row, row_specs({**row, "kind": "training"}))))))
    predicted = compared_bytes(result.memory_hbm, reserve_of(chosen), measure) / scale
    notes = (*chosen.assumptions, _counted(result, chosen, measure))
    if not bool(result.feasible):
        notes = (*notes, "infeasible as configured: " + "; ".join(result.infeasible_reasons))
    return MemoryPrediction(f"peak memory {measure} per GPU", predicted, notes, bool(result.feasible))


def _counted(result: StepEstimate, chosen: RowSpecs, measure: str) -> str:
    """What the compared figure holds, in GiB, for the row's notes."""
    hbm = result.memory_hbm
    parts = {"weights": hbm.weights, "gradients": hbm.gradients, "optimizer": hbm.optimizer_states,
             "activations": hbm.activations, "checkpoints": hbm.checkpoints, "buffers": hbm.comm_buffers}
    listed = ", ".join(f"{k} {float(v) / 2**30:.2f}" for k, v in parts.items())
    outside = reserve_of(chosen) / 2**30
    if measure == ALLOCATED:
        return f"compared: the tensors (GiB: {listed}); not the runtime allowance"
    fragmentation = float(hbm.runtime) / 2**30 - outside
    return (f"compared: the tensors (GiB: {listed}) and the allocator's fragmentation {fragmentation:.2f}; not the "
            f"{outside:.2f} GiB reserve outside the allocator")
