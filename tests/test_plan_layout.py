"""plan/layout.py against hand-worked layouts (SC'21 Table 1, Megatron's uneven first/last stages,
DeepSeek-V3's first-3-dense layers) and invariants of the layer splits."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as hs

from armillary.errors import SpecError
from armillary.plan import layout
from armillary.specs.loading import load_system
from armillary.specs.model import MixtureOfExperts, Model
from armillary.specs.strategy import Strategy

# SC'21 (Narayanan et al.) Table 1 rows: (GPUs, tp, pp, global batch) -> dp = GPUs / (tp pp),
# micro-batches per pipeline m = B / (b dp) with b = 1
SC21 = [  # 145.6B: 1536 / 64 = 24 replicas, 2304 / 24 = 96; 530B: 2520 / 280 = 9, 2520 / 9 = 280;
    (1536, 8, 8, 2304, 24, 96),  # 1T: 3072 / 512 = 6, 3072 / 6 = 512
    (2520, 8, 35, 2520, 9, 280),
    (3072, 8, 64, 3072, 6, 512),
]


@pytest.mark.parametrize(("gpus", "tp", "pp", "batch", "dp", "m"), SC21)
def test_sc21_table1_layouts(gpus, tp, pp, batch, dp, m):
    assert layout.data_parallel_degree(gpus, tp, 1, pp) == dp
    assert layout.microbatch_count(batch, 1, dp) == m


def test_microbatch_count_by_hand():
    assert layout.microbatch_count(1536, 1, 8) == 192
    assert layout.microbatch_count(1536, 4, 8) == 48


def test_data_parallel_degree_over_arrays():
    got = layout.data_parallel_degree(np.array([1536, 2520, 3072, 64]), np.array([8, 8, 8, 8]), 1.0,
                                      np.array([8, 35, 64, 16]))
    assert got.tolist() == [24, 9, 6, 1]  # 64 devices cannot host tp8 x pp16: at least one replica
    assert layout.data_parallel_degree(64, 2, np.array([1, 2, 4]), 2).tolist() == [16, 8, 4]


def test_data_parallel_of_specs():
    system = load_system("dgx-h100", 16)
    assert layout.data_parallel(Strategy(tp=8, pp=2), system) == 1
    assert layout.data_parallel(Strategy(tp=2, cp=2), system) == 4
    assert layout.data_parallel(Strategy(tp=2, dp=2), system) == 2  # as given
    with pytest.raises(SpecError, match="exceeds"):
        layout.data_parallel(Strategy(tp=8, pp=4), system)  # 32 > 16


def test_rank_queries_split_the_sequence():
    assert layout.rank_queries(4096, 4) == 1024
    assert layout.rank_queries(np.array([8192.0, 8192.0]), np.array([1, 8])).tolist() == [8192, 1024]


@pytest.mark.parametrize(("args", "expected"), [
    ((80, 4, 0, 0), (20, 20, 20)),
    ((80, 4, 2, 0), (2, 26, 26)),  # 78 layers over the 3 other stages
    ((80, 4, 0, 5), (25, 25, 5)),  # 75 over 3
    ((96, 8, 9, 9), (9, 13, 9)),  # 78 over 6 middle stages
    ((61, 8, 0, 0), (7.625, 7.625, 7.625)),  # fractional where uneven: what the estimator prices
    ((30, 2, 10, 0), (10, 20, 20)),  # pp 2: the one other stage is the last
])
def test_stage_layers_by_hand(args, expected):
    assert tuple(float(x) for x in layout.stage_layers(*args)) == pytest.approx(expected)


def test_stage_layers_over_arrays():
    first, mid, last = layout.stage_layers(80, np.array([4, 4, 8]), np.array([0, 2, 3]), np.array([0, 0, 5]))
    assert first.tolist() == [20, 2, 3] and mid.tolist() == [20, 26, 12] and last.tolist() == [20, 26, 5]


@pytest.mark.parametrize(("layers", "stages", "expected"), [
    (10, 4, [2, 2, 3, 3]), (80, 4, [20] * 4), (61, 8, [7, 7, 7, 8, 8, 8, 8, 8]), (3, 4, [0, 1, 1, 1])])
def test_whole_layers_put_the_remainder_on_the_last_stages(layers, stages, expected):
    assert layout.whole_layers(layers, stages) == expected


@pytest.mark.parametrize(("layers", "pp", "busiest", "fewest"), [(61, 8, 8, 7), (80, 4, 20, 20), (10, 4, 3, 2)])
def test_busiest_and_fewest_stage(layers, pp, busiest, fewest):
    assert layout.busiest_stage_layers(layers, pp) == busiest
    assert layout.fewest_stage_layers(layers, pp) == fewest


# DeepSeek-V3: 61 layers, the first 3 dense (first_k_dense_replace = 3)
@pytest.mark.parametrize(("dense", "pp", "first", "last", "expected"), [
    (3, 8, 0, 0, (3, 0, 0)),  # 7.625 layers per stage: all 3 dense layers on the first stage
    (3, 16, 0, 0, (3, 0, 0)),  # 3.8125 per stage
    (3, 16, 1, 0, (1, 0, 0)),  # 1 + 15 x 4: stage 1 holds dense layers 1, 2; the last middle one none
    (55, 16, 1, 0, (1, 2, 0)),  # the last middle stage (14) holds layers 53..56: 53, 54 dense
    (58, 16, 1, 0, (1, 4, 1)),  # layers 57..60 on the last stage: 57 dense
    (61, 8, 0, 0, (7.625, 7.625, 7.625)),  # a dense model: every layer
])
def test_stage_dense_layers_deepseek_v3(dense, pp, first, last, expected):
    n_first, n_mid, n_last = layout.stage_layers(61, pp, first, last)
    got = layout.stage_dense_layers(dense, pp, n_first, n_mid, n_last)
    assert tuple(float(x) for x in got) == pytest.approx(expected)


def _dense_by_counting(counts: list[int], dense: int) -> list[int]:
    """Dense layers per stage from the layer indices each stage holds."""
    start = np.cumsum([0, *counts])
    return [sum(1 for i in range(start[s], start[s + 1]) if i < dense) for s in range(len(counts))]


@given(pp=hs.integers(3, 12), mid=hs.integers(1, 9), first=hs.integers(1, 12), last=hs.integers(1, 12),
       data=hs.data())
def test_stage_dense_layers_match_counting_layer_by_layer(pp, mid, first, last, data):
    counts = [first, *([mid] * (pp - 2)), last]
    dense = data.draw(hs.integers(0, sum(counts)))
    by_hand = _dense_by_counting(counts, dense)
    got = layout.stage_dense_layers(dense, pp, first, mid, last)
    assert [float(x) for x in got] == [by_hand[0], by_hand[-2], by_hand[-1]]


def test_a_single_stage_is_its_own_last_stage():
    n_first, n_mid, n_last = layout.stage_layers(61, 1, 0, 0)
    first, _, last = layout.stage_dense_layers(3, 1, n_first, n_mid, n_last)
    assert (float(first), float(last)) == (3, 3)


def _moe(layers: int, dense: int) -> Model:
    return Model(layers=layers, hidden=64, heads=4, ffn=256, vocab=1000,
                 moe=MixtureOfExperts(experts=4, top_k=2, expert_ffn=64, dense_layers=dense))


def test_stage_layer_kinds_of_a_small_moe_model():
    # 8 layers, 1 dense, pp 2 x vpp 2 = 4 virtual stages of 2 layers
    kinds = layout.stage_layer_kinds(_moe(8, 1), Strategy(pp=2, vpp=2))
    assert kinds == [[False, True], [True, True], [True, True], [True, True]]
    # 10 layers over pp 3 with 2 on the first stage: 2, 4, 4; layers 0..2 dense
    kinds = layout.stage_layer_kinds(_moe(10, 3), Strategy(pp=3, first_stage_layers=2))
    assert kinds == [[False, False], [False, True, True, True], [True] * 4]
    # uneven whole split: 10 over 4 -> 2, 2, 3, 3
    assert [len(k) for k in layout.stage_layer_kinds(_moe(10, 0), Strategy(pp=4))] == [2, 2, 3, 3]


def test_stage_layer_kinds_of_a_dense_model_are_all_dense():
    dense = Model(layers=6, hidden=64, heads=4, ffn=256, vocab=1000)
    assert layout.stage_layer_kinds(dense, Strategy(pp=3)) == [[False, False]] * 3


def test_stage_layer_kinds_refuse_an_uneven_rest():
    with pytest.raises(SpecError, match="7 layers"):  # 10 - 3 = 7 over 2 stages
        layout.stage_layer_kinds(_moe(10, 1), Strategy(pp=3, first_stage_layers=3))


@given(layers=hs.integers(1, 200), stages=hs.integers(1, 64))
def test_whole_layers_sum_to_the_layers_and_differ_by_at_most_one(layers, stages):
    split = layout.whole_layers(layers, stages)
    assert len(split) == stages and sum(split) == layers
    assert max(split) - min(split) <= 1
    assert split == sorted(split)  # the remainder on the last stages
    assert max(split) == layout.busiest_stage_layers(layers, stages)
    assert min(split) == layout.fewest_stage_layers(layers, stages)


@given(layers=hs.integers(4, 200), pp=hs.integers(2, 32), first=hs.integers(0, 20), last=hs.integers(0, 20))
def test_stage_layers_add_up_to_the_model(layers, pp, first, last):
    if pp == 2 and first and last:
        last = 0  # two given stages leave no stage to share the rest
    n_first, n_mid, n_last = layout.stage_layers(layers, pp, first, last)
    assert n_first + (pp - 2) * n_mid + n_last == pytest.approx(layers)
    assert (n_first == first) if first else (n_first == n_mid)
    assert (n_last == last) if last else (n_last == n_mid)
