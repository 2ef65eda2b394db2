"""A block of the search is evaluated on the axes that vary in it only (issue 47: numpy's per-call cost grows
with the number of dimensions): blocks of any size, down to one point, give the same answer."""

from __future__ import annotations

import pytest

from armillary.search.run import search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

SMALL = StrategySpace(tp=(8,), pp=(4, 8), vpp=(1, 2), micro_batch=(1, 2), zero=(0, 1), recompute=("none", "full"))


@pytest.mark.parametrize("chunk", [16, 262144])
def test_blocks_of_any_size_give_the_same_top(chunk):
    model, system = load_model("gpt3-175b"), load_system("dgx-a100", 64)
    workload = load_workload({"seq_len": 2048, "global_batch": 64})
    base = load_strategy({"attention": "flash"})
    whole = search(model, system, workload, base, SMALL, top_k=5)
    one = StrategySpace(tp=(8,), pp=(8,), vpp=(1,), micro_batch=(1,), zero=(1,), recompute=("full",),
                        sequence_parallel=(True,), overlap_dp=(True,), overlap_tp=(False,),
                        overlap_param_gather=(True,), rank_order=("tp-cp-dp-pp",))
    point = search(model, system, workload, base, one, top_k=1, chunk=1)  # a block of one point
    assert point.points == point.evaluated == 1 and point.top[0].step_time_s > 0
    parts = search(model, system, workload, base, SMALL, top_k=5, chunk=chunk)
    assert [(c.index, c.step_time_s) for c in parts.top] == [(c.index, c.step_time_s) for c in whole.top]
    assert parts.points == whole.points


def test_the_running_best_matches_a_full_sort_with_ties_and_infinities():
    """`_best` partitions before it sorts: the same k best distinct values (the first index of each) as
    sorting every finite point, on values with many ties (axes that change nothing) and infeasible points."""
    import numpy as np

    from armillary.search.run import _best

    rng = np.random.default_rng(7)
    for _ in range(300):
        n, k = int(rng.integers(0, 300)), int(rng.integers(1, 25))
        values = rng.choice(rng.random(int(rng.integers(1, 40))), n)
        values[rng.random(n) < 0.3] = np.inf
        index = rng.permutation(n).astype(np.int64)
        finite = np.flatnonzero(np.isfinite(values))
        order = finite[np.lexsort((index[finite], values[finite]))]
        first = np.ones(len(order), dtype=bool)
        first[1:] = values[order[1:]] != values[order[:-1]]
        assert np.array_equal(_best(index, values, k), order[first][:k])


def test_the_best_found_in_the_estimates_order_are_the_blocks_best():
    """A block's values are searched in the estimate's order (its varying axes reordered, `Problem.evaluate`) and
    only the candidates' indices computed (`_inner_indices`): the same points, in the same order, as searching
    the values put back in index order with every index."""
    import numpy as np

    from armillary.search.run import _best, _inner_indices

    rng = np.random.default_rng(11)
    for _ in range(200):
        shape = tuple(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 6))))
        order = [d for d in rng.permutation(len(shape)).tolist() if shape[d] > 1]
        inner = tuple(shape[d] for d in order)
        start, k = int(rng.integers(0, 1000)), int(rng.integers(1, 12))
        values = rng.choice(rng.random(int(rng.integers(1, 9))), inner)  # many ties
        values[rng.random(inner) < 0.3] = np.inf
        back = np.argsort(order)
        in_index_order = values.transpose(back).reshape(-1) if order else values.reshape(-1)
        index = np.arange(start, start + in_index_order.size, dtype=np.int64)
        want = _best(index, in_index_order, k)
        flat = values.reshape(-1)
        got = _best(None, flat, k, lambda at, a=start, s=shape, o=order: _inner_indices(at, a, s, o))
        assert np.array_equal(_inner_indices(got, start, shape, order), index[want])
        assert np.array_equal(flat[got], in_index_order[want])
