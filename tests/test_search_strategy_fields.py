"""The search carries the base strategy's newer fields (issue 44): a Megatron pipeline layout fixes the pipeline
degrees it names, and selective recompute modules hold only where a point recomputes selectively, so every point
is a valid strategy whose estimate equals the search's."""

from __future__ import annotations

import pytest

import armillary
from armillary import Strategy, Training
from armillary.errors import SpecError

SPACE = {"tp": [1, 2], "recompute": ["none", "selective", "full"], "micro_batch": [1], "attention": ["flash"],
         "zero": [1], "overlap_dp": [True], "overlap_tp": [False], "overlap_param_gather": [True],
         "rank_order": ["tp-cp-dp-pp"]}
WORKLOAD = Training(seq_len=4096, global_batch=32)


def test_a_layout_and_recompute_modules_search_as_single_estimates():
    base = Strategy(pp=2, pipeline_layout="Et*16|t*16L", recompute="selective",
                    recompute_modules=("core_attn", "layernorm"))
    result = armillary.run_search("llama3-8b", "dgx-h100", base, WORKLOAD, SPACE, gpus=16, top=6)
    modes = set()
    for point in result.top:
        st = point.strategy
        assert st.pp == 2 and st.pipeline_layout == base.pipeline_layout
        selective = st.recompute.value == "selective"
        modes.add(st.recompute.value)
        assert (len(st.recompute_modules) == 2) == selective
        single = armillary.estimate("llama3-8b", "dgx-h100", st, WORKLOAD, gpus=16)
        assert float(point.step_time_s) == pytest.approx(float(single.step_time_s), rel=1e-12)
    assert len(modes) >= 2


def test_a_layout_refuses_a_space_of_other_pipeline_degrees():
    base = Strategy(pp=2, pipeline_layout="Et*16|t*16L")
    with pytest.raises(SpecError, match="pipeline_layout fixes pp 2 and vpp 1"):
        armillary.run_search("llama3-8b", "dgx-h100", base, WORKLOAD, {**SPACE, "pp": [2, 4]}, gpus=16)
