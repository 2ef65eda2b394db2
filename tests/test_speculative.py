"""Speculative decoding: the expected yield by hand, never faster at acceptance 0, near k + 1 when
memory-bound at full acceptance."""

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armillary.errors import SpecError
from armillary.estimate.inference import replica_model
from armillary.plan.arrays import ModelArrays
from armillary.serving.speculative import Speculation, expected_tokens, speculative_step
from armillary.specs.loading import load_model, load_system
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Inference

R = replica_model(ModelArrays.of(load_model("llama2-7b")), Strategy.model_validate({"attention": "flash"}),
                  Inference(input_len=512, output_len=64), load_system("dgx-h100", 1))


def test_expected_tokens_by_hand():
    assert expected_tokens(4, 0.0) == 1.0
    assert expected_tokens(4, 1.0) == 5.0
    assert expected_tokens(3, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)  # (1 - 0.5^4) / 0.5


@settings(max_examples=25, deadline=None)
@given(st.integers(1, 8), st.integers(1, 256), st.floats(0, 32_000), st.floats(0, 0.5))
def test_acceptance_zero_is_never_faster(k, batch, past, draft_cost):
    step = speculative_step(R, batch, past, Speculation(k, 0.0, draft_cost))
    assert step.time_per_token_s >= step.plain_step_s
    assert step.speedup <= 1.0


def test_full_acceptance_at_batch_one_is_near_k_plus_one():
    step = speculative_step(R, 1, 1024, Speculation(4, 1.0, 0.0))
    assert 3.5 < step.speedup <= 5.0  # 5 tokens per step; verifying 5 tokens costs a little more than 1


def test_bad_speculation_names_the_fields():
    with pytest.raises(SpecError, match="acceptance"):
        Speculation(4, 1.5, 0.1)
