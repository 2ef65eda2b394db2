"""plan/codes.py: a strategy's closed choices as array codes and back.

The codes are the documented table (plan/arrays.py comments): recompute none/selective/full -> 0/1/2,
attention standard/flash1/flash/flash3 -> 0/1/2/3, rank order tp-cp-dp-pp/tp-cp-pp-dp -> 0/1, ...
"""

import pytest

from armillary.plan import codes
from armillary.plan.arrays import StrategyArrays
from armillary.specs.strategy import (
    Attention,
    ContextParallel,
    Offload,
    Overlap,
    RankOrder,
    Recompute,
    RecomputeModule,
    Schedule,
    Strategy,
    TrainingPrecision,
    ZeroStage,
)

# a base that admits every value below: tp > 1 for sequence parallelism, ep = 1 for rank order tp-cp-pp-dp
BASE = Strategy(tp=2)
NUMBERS = {"tp": [1, 2, 8], "pp": [1, 4], "cp": [1, 2], "vpp": [1, 3], "ep": [1, 8], "micro_batch": [1, 4],
           "recompute_layers": [None, 1, 5], "offload_activation_layers": [None, 1, 7]}  # None (every layer): 0
BASES = {"recompute_layers": Strategy(tp=2, recompute="full"),  # fields that need another base
         "offload_activation_layers": Strategy(tp=2, offload={"activations": True}),
         "offload_gradients": Strategy(tp=2, offload={"optimizer": True})}  # ZeRO-Offload: with the optimizer


def _decode(field: str, code: float):
    """Spec value of an array code, the way a search rebuilds a point (the number, a 0/1 flag or a member)."""
    spec = codes.STRATEGY_FIELDS[field]
    if spec.codes is not None:
        return spec.codes.member(code)
    if isinstance(codes.strategy_value(BASE, field), bool):
        return bool(code)
    if field in ("recompute_layers", "offload_activation_layers"):
        return int(code) or None
    return int(code)


def _cases():
    for field, spec in codes.STRATEGY_FIELDS.items():
        if spec.codes is not None:
            values = list(spec.codes.members)
        elif field in NUMBERS:
            values = NUMBERS[field]
        else:
            values = [False, True]
        for value in values:
            yield pytest.param(field, value, id=f"{field}={getattr(value, 'value', value)}")


@pytest.mark.parametrize(("field", "value"), list(_cases()))
def test_every_field_round_trips_through_its_code(field, value):
    code = codes.encode(field, value)
    assert isinstance(code, float)
    rebuilt = codes.with_values(BASES.get(field, BASE), {field: _decode(field, code)})
    assert codes.strategy_value(rebuilt, field) == value
    assert type(codes.strategy_value(rebuilt, field)) is type(value)


def test_every_field_is_covered_by_the_round_trip():
    flags = [f for f, s in codes.STRATEGY_FIELDS.items() if s.codes is None and f not in NUMBERS]
    assert flags and "recompute_layers" not in flags and "offload_activation_layers" not in flags
    assert all(isinstance(codes.strategy_value(BASE, f), bool) for f in flags)


@pytest.mark.parametrize(("coding", "enum"), [
    (codes.RECOMPUTE, Recompute), (codes.ATTENTION, Attention), (codes.PRECISION, TrainingPrecision),
    (codes.ZERO, ZeroStage), (codes.RANK_ORDER, RankOrder), (codes.CP_COMM, ContextParallel),
    (codes.SCHEDULE, Schedule)])
def test_each_coding_covers_its_enum_once(coding, enum):
    """A member added to an enum without a code would be unreachable by a search."""
    assert sorted(coding.members, key=str) == sorted(enum, key=str)
    assert [coding.member(coding.code(m)) for m in enum] == list(enum)


@pytest.mark.parametrize(("field", "value", "code"), [
    ("recompute", Recompute.NONE, 0), ("recompute", Recompute.SELECTIVE, 1), ("recompute", Recompute.FULL, 2),
    ("attention", Attention.STANDARD, 0), ("attention", Attention.FLASH1, 1), ("attention", Attention.FLASH, 2),
    ("attention", Attention.FLASH3, 3),  # the FlashAttention version
    ("rank_order", RankOrder.DP_INNER, 0), ("rank_order", RankOrder.PP_INNER, 1),
    ("cp_comm", ContextParallel.RING, 0), ("cp_comm", ContextParallel.ALL_TO_ALL, 1),
    ("precision", TrainingPrecision.FP32, 0), ("precision", TrainingPrecision.FP8, 3),
    ("zero", ZeroStage.NONE, 0), ("zero", ZeroStage.PARAMETERS, 3),  # the ZeRO stage itself
    ("overlap_tp", True, 1), ("offload_weights", False, 0), ("tp", 8, 8),
])
def test_codes_follow_the_documented_table(field, value, code):
    assert codes.encode(field, value) == code


def test_named_codes_the_formulas_compare_against():
    assert (codes.RECOMPUTE_NONE, codes.RECOMPUTE_SELECTIVE, codes.RECOMPUTE_FULL) == (0, 1, 2)
    assert (codes.SCHEDULE_GPIPE, codes.SCHEDULE_1F1B, codes.SCHEDULE_INTERLEAVED) == (0, 1, 2)
    assert codes.RANK_ORDER_PP_INNER == 1


RICH = Strategy(tp=4, pp=4, vpp=2, cp=2, micro_batch=2, sequence_parallel=True, recompute="full", recompute_layers=3,
                attention="flash3", precision="fp8", zero=3, rank_order="tp-cp-pp-dp", cp_comm="all_to_all",
                pp_scatter_gather=False, overlap=Overlap(tp_comm=True, dp_grad_reduce=False),
                offload=Offload(optimizer=True))


def test_strategy_arrays_hold_the_table_codes():
    a = StrategyArrays.of(RICH, 6)
    assert (a.tp, a.pp, a.vpp, a.cp, a.micro_batch, a.dp) == (4, 4, 2, 2, 2, 6)
    assert a.recompute == 2 and a.attention == 3 and a.rank_order == 1
    assert a.precision == 3 and a.zero == 3 and a.cp_comm == 1
    assert a.schedule == 2  # vpp = 2 defaults to interleaved
    assert (a.sequence_parallel, a.pp_scatter_gather) == (1, 0)
    assert (a.overlap_tp, a.overlap_dp, a.overlap_param_gather, a.overlap_ep) == (1, 0, 1, 0)
    assert (a.offload_weights, a.offload_activations, a.offload_optimizer) == (0, 0, 1)
    assert a.etp == 4  # expert tp defaults to tp
    assert (a.first_stage_layers, a.last_stage_layers, a.capacity_factor) == (0, 0, 0)


def test_strategy_arrays_flag_the_selective_recompute_modules():
    s = Strategy(recompute="selective", recompute_modules=("mlp", "moe_act"))
    a = StrategyArrays.of(s, 1)
    flags = {m: getattr(a, f"recompute_{m.value}") for m in RecomputeModule}
    assert flags == {m: float(m in (RecomputeModule.MLP, RecomputeModule.MOE_ACT)) for m in RecomputeModule}
    assert a.recompute == 1
    assert StrategyArrays.of(Strategy(schedule="gpipe"), 1).schedule == 0


def test_arrays_decode_back_to_the_strategy():
    """Every coded field of StrategyArrays.of rebuilds the strategy it came from (a search's point)."""
    a = StrategyArrays.of(RICH, 6)
    values = {f: _decode(f, getattr(a, f)) for f in codes.STRATEGY_FIELDS}
    rebuilt = codes.with_values(Strategy(), values)
    assert rebuilt.model_dump() == RICH.model_dump()


def test_with_values_resets_dp_and_schedule():
    s = Strategy(tp=2, pp=2, dp=4, schedule="gpipe")
    rebuilt = codes.with_values(s, {"tp": 4})
    assert rebuilt.tp == 4 and rebuilt.pp == 2
    assert rebuilt.dp is None and rebuilt.schedule is None  # dp follows the devices again
    assert rebuilt.pipeline_schedule is Schedule.ONE_F_ONE_B


def test_with_values_lets_the_schedule_follow_vpp():
    """An interleaved strategy moved to vpp = 1 would be refused if its schedule were kept."""
    s = Strategy(pp=4, vpp=2, schedule="interleaved")
    assert codes.with_values(s, {"vpp": 1}).pipeline_schedule is Schedule.ONE_F_ONE_B
    assert codes.with_values(Strategy(pp=4), {"vpp": 3}).pipeline_schedule is Schedule.INTERLEAVED


def test_with_values_leaves_the_original_and_other_fields_alone():
    s = Strategy(tp=2, recompute="full", overlap=Overlap(tp_comm=True))
    rebuilt = codes.with_values(s, {"overlap_dp": False})
    assert s.overlap.dp_grad_reduce is True
    assert rebuilt.overlap == Overlap(tp_comm=True, dp_grad_reduce=False)
    assert rebuilt.recompute is Recompute.FULL and rebuilt.tp == 2


def test_with_values_still_validates_the_strategy():
    with pytest.raises(ValueError, match="sequence_parallel"):
        codes.with_values(Strategy(tp=2), {"sequence_parallel": True, "tp": 1})
