"""The one encoding of a strategy's closed choices into array codes, and back.

The cost functions take numbers so that one formula serves one configuration (floats) and a sweep
(arrays): a closed choice becomes its position in a fixed tuple of enum members (`Codes`), a flag 0/1.
`STRATEGY_FIELDS` names, for every coded field of `StrategyArrays` that a search can vary, where it sits
in a `Strategy` spec, so that a point of a search is rebuilt as a spec without a second mapping.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Any, Generic, TypeVar

from armillary.specs.strategy import (
    Attention,
    BlockFormat,
    ContextParallel,
    ProjectionPrecision,
    RankOrder,
    Recompute,
    Schedule,
    Strategy,
    TpLayout,
    TpOverlap,
    TrainingPrecision,
    ZeroStage,
)

E = TypeVar("E", bound=Enum)


@dataclass(frozen=True)
class Codes(Generic[E]):
    """A closed choice coded as its member's position in `members`."""

    members: tuple[E, ...]

    def code(self, member: E) -> float:
        return float(self.members.index(member))

    def member(self, code: float) -> E:
        return self.members[int(code)]


PRECISION = Codes((TrainingPrecision.FP32, TrainingPrecision.BF16, TrainingPrecision.FP16, TrainingPrecision.FP8))
BLOCK_FORMAT = Codes((BlockFormat.NONE, BlockFormat.MXFP8, BlockFormat.NVFP4, BlockFormat.MXFP4, BlockFormat.INT8))
PROJECTIONS = Codes((ProjectionPrecision.RECIPE, ProjectionPrecision.FP8, ProjectionPrecision.BF16))
RECOMPUTE = Codes((Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL))
SCHEDULE = Codes((Schedule.GPIPE, Schedule.ONE_F_ONE_B, Schedule.INTERLEAVED, Schedule.ZB_H1))
# 0 standard attention, else the FlashAttention version (1, 2, 3)
ATTENTION = Codes((Attention.STANDARD, Attention.FLASH1, Attention.FLASH, Attention.FLASH3))
ZERO = Codes(tuple(ZeroStage))
RANK_ORDER = Codes((RankOrder.DP_INNER, RankOrder.PP_INNER))
CP_COMM = Codes((ContextParallel.RING, ContextParallel.ALL_TO_ALL))
TP_OVERLAP = Codes((TpOverlap.USERBUFFERS, TpOverlap.RING))
TP_LAYOUT = Codes((TpLayout.ONE_D, TpLayout.TWO_D))

# named codes the formulas compare against
RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL = (RECOMPUTE.code(r) for r in RECOMPUTE.members)
SCHEDULE_GPIPE, SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SCHEDULE_ZB_H1 = (SCHEDULE.code(s) for s in SCHEDULE.members)
RANK_ORDER_PP_INNER = RANK_ORDER.code(RankOrder.PP_INNER)


@dataclass(frozen=True)
class StrategyField:
    """Where a coded field sits in a Strategy spec (`path`) and how its values are coded (None: the number
    itself, a flag as 0/1)."""

    path: tuple[str, ...]
    codes: Codes[Any] | None = None

    def encode(self, value: Any) -> float:
        """The array code of a spec value."""
        if self.codes is not None:
            return self.codes.code(value)
        return 0.0 if value is None else float(value)  # an unset count (recompute_layers...: every layer)


STRATEGY_FIELDS: dict[str, StrategyField] = {
    "tp": StrategyField(("tp",)),
    "pp": StrategyField(("pp",)),
    "cp": StrategyField(("cp",)),
    "vpp": StrategyField(("vpp",)),
    "ep": StrategyField(("ep",)),
    "micro_batch": StrategyField(("micro_batch",)),
    "sequence_parallel": StrategyField(("sequence_parallel",)),
    "recompute": StrategyField(("recompute",), RECOMPUTE),
    "recompute_layers": StrategyField(("recompute_layers",)),
    "zero": StrategyField(("zero",), ZERO),
    "precision": StrategyField(("precision",), PRECISION),
    "block_format": StrategyField(("block_format",), BLOCK_FORMAT),
    "attention": StrategyField(("attention",), ATTENTION),
    "rank_order": StrategyField(("rank_order",), RANK_ORDER),
    "cp_comm": StrategyField(("cp_comm",), CP_COMM),
    "pp_scatter_gather": StrategyField(("pp_scatter_gather",)),
    "overlap_dp": StrategyField(("overlap", "dp_grad_reduce")),
    "overlap_tp": StrategyField(("overlap", "tp_comm")),
    "tp_overlap_method": StrategyField(("overlap", "tp_comm_method"), TP_OVERLAP),
    "overlap_param_gather": StrategyField(("overlap", "param_gather")),
    "overlap_ep": StrategyField(("overlap", "ep_comm")),
    "dispatch_dedup": StrategyField(("routing", "dispatch_dedup")),
    "offload_weights": StrategyField(("offload", "weights")),
    "offload_activations": StrategyField(("offload", "activations")),
    "offload_activation_layers": StrategyField(("offload", "activation_layers")),
    "offload_optimizer": StrategyField(("offload", "optimizer")),
    "offload_gradients": StrategyField(("offload", "gradients")),
    "offload_experts": StrategyField(("offload", "experts")),
}


def encode(field: str, value: Any) -> float:
    """The array code of `value` for the StrategyArrays field `field`."""
    return STRATEGY_FIELDS[field].encode(value)


def strategy_value(strategy: Strategy, field: str) -> Any:
    """The spec value of a coded field of `strategy`."""
    value: Any = strategy
    for part in STRATEGY_FIELDS[field].path:
        value = getattr(value, part)
    return value


def with_values(strategy: Strategy, values: dict[str, Any]) -> Strategy:
    """`strategy` with the given coded fields set to spec values (a point of a search); dp and the schedule
    go back to their defaults (devices / (tp cp pp); interleaved when vpp > 1), which follow the degrees."""
    data = strategy.model_dump()
    for field, value in values.items():
        *parents, leaf = STRATEGY_FIELDS[field].path
        node = data
        for part in parents:
            node = node[part]
        node[leaf] = value
    data.update(dp=None, schedule=None)
    return Strategy.model_validate(data)
