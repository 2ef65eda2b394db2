"""The strategy search's answers pinned (issue 47: the search's speed work must not move them): the top 10 of
fixed GPT-3 175B / 64 A100 spaces, by step time and by memory, with the counts of points evaluated, pruned,
bounded and feasible, as the search gave them before the speed work (364fc0c)."""

from __future__ import annotations

import pytest

from armillary.search.run import Objective, search
from armillary.search.space import StrategySpace
from armillary.specs.loading import load_model, load_strategy, load_system, load_workload

WIDE = StrategySpace(cp=(1, 2, 4), micro_batch=(1, 2, 4, 8, 16), offload_optimizer=(False, True),
                     offload_activations=(False, True))
# label: (space, block size, objective, (points, evaluated, pruned, bounded, feasible), top 10 (index, value))
PINNED = {
    "default": (None, 262144, Objective.TIME, (202752, 48960, 153792, 0, 10928),
        [(53998, 11.466042227770451),
         (53996, 11.489972737924298),
         (72388, 11.494322190503448),
         (72772, 11.531785919127131),
         (67806, 11.608587038852361),
         (54014, 11.65814710900122),
         (70852, 11.70847385939718),
         (67804, 11.721244745541526),
         (66270, 11.819779701381568),
         (67798, 11.833902452230692)]),
    "wide": (WIDE, 4096, Objective.TIME, (3041280, 397056, 2644224, 407040, 176464),
        [(234, 10.157004043931648),
         (293626, 10.233687411445251),
         (294394, 10.336802934301415),
         (9450, 10.340211242651648),
         (564730, 10.358103589384651),
         (294378, 10.374837143165573),
         (788986, 10.400868099551127),
         (293610, 10.404715261291406),
         (302842, 10.416894610165249),
         (303610, 10.520010133021414)]),
    "wide-memory": (WIDE, 262144, Objective.MEMORY, (3041280, 609792, 2431488, 0, 276176),
        [(922374, 19171300352.0),
         (921606, 19391501312.0),
         (923910, 19404182528.0),
         (799686, 19477959232.0),
         (792006, 19529888320.0),
         (798918, 19533009472.0),
         (853446, 19547851136.0),
         (852678, 19602901376.0),
         (830406, 19606071680.0),
         (784326, 19633746496.0)]),
}


@pytest.mark.parametrize("label", PINNED)
def test_search_answers_pinned(label):
    space, chunk, objective, counts, top = PINNED[label]
    r = search(load_model("gpt3-175b"), load_system("dgx-a100", 64),
               load_workload({"seq_len": 2048, "global_batch": 64}), load_strategy({"attention": "flash"}), space,
               objective=objective, top_k=10, chunk=chunk)
    assert (r.points, r.evaluated, r.pruned, r.bounded, r.feasible) == counts
    assert [c.index for c in r.top] == [i for i, _ in top]
    values = [c.step_time_s if objective is Objective.TIME else c.memory_bytes for c in r.top]
    assert values == pytest.approx([v for _, v in top], rel=1e-12)
