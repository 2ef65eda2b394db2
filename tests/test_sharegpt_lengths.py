"""ShareGPT lengths as vLLM's benchmark client sends them (serving.trace.sharegpt_lengths): the measured
quantile tables, the given means, and replies that stop at their first token when the model stops early.
Expected values by hand from the tables."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from armillary.errors import SpecError
from armillary.serving.trace import (
    SHAREGPT_PROMPTS,
    SHAREGPT_QUANTILES,
    SHAREGPT_REPLIES,
    benchmark_trace,
    sharegpt_lengths,
)
from armillary.specs.workload import Arrivals, LengthDistribution


def test_the_tables_means_by_hand() -> None:
    # trapezoids of the piecewise-linear inverse CDF: sum of (u[i+1] - u[i]) (v[i] + v[i+1]) / 2
    u = SHAREGPT_QUANTILES
    for table, mean in ((SHAREGPT_PROMPTS, 215.5), (SHAREGPT_REPLIES, 196.5575)):
        by_hand = sum((u[i + 1] - u[i]) * (table[i] + table[i + 1]) / 2 for i in range(len(u) - 1))
        assert by_hand == pytest.approx(mean, abs=0.01)


def test_at_the_tables_means_the_client_sample_comes_back() -> None:
    prompts, replies = sharegpt_lengths(np.random.default_rng(1), 200_000, 215.5, 196.56)
    assert prompts.mean() == pytest.approx(215.5, rel=0.01) and replies.mean() == pytest.approx(196.6, rel=0.01)
    # the measured shape: prompt median 83, p90 621, at most 997; replies light-tailed (p99 739 < 4x p50 168)
    assert np.median(prompts) == pytest.approx(83, abs=2) and np.percentile(prompts, 90) == pytest.approx(621, abs=5)
    assert prompts.max() <= 997 and replies.max() <= 780
    assert np.median(replies) == pytest.approx(168, abs=3) and np.percentile(replies, 99) == pytest.approx(739, abs=5)


def test_a_model_that_stops_early_sends_some_replies_of_one_token() -> None:
    # Llama 3.1 405B base generated 122 tokens a request on average: (196.56 - 122) / 195.56 = 38.1% stop at
    # once (378 of the 1,000 in dstack's runs), the others run their whole reply
    _, replies = sharegpt_lengths(np.random.default_rng(2), 200_000, 215.2, 122.0)
    assert replies.mean() == pytest.approx(122.0, rel=0.01)
    assert np.mean(replies == 1) == pytest.approx(0.381 + 0.025 * (1 - 0.381), abs=0.01)  # the table's own 1s too
    assert replies.max() <= 780  # the tail is the dataset's, not shrunk


def test_longer_replies_scale_the_table() -> None:
    _, replies = sharegpt_lengths(np.random.default_rng(3), 100_000, 215.0, 393.2)
    assert replies.mean() == pytest.approx(393.2, rel=0.01) and replies.max() <= 2 * 780 + 1
    assert np.mean(replies == 1) < 0.05


@settings(max_examples=20, deadline=None)
@given(st.floats(1, 5000), st.floats(1, 5000))
def test_any_means_are_met(prompt: float, reply: float) -> None:
    prompts, replies = sharegpt_lengths(np.random.default_rng(0), 50_000, prompt, reply)
    assert prompts.min() >= 1 and replies.min() >= 1
    # rounding to whole tokens moves means of a few tokens
    assert prompts.mean() == pytest.approx(prompt, rel=0.02, abs=0.6)
    assert replies.mean() == pytest.approx(reply, rel=0.02, abs=0.6)


def test_means_below_one_token_are_refused() -> None:
    with pytest.raises(SpecError, match="output_len"):
        sharegpt_lengths(np.random.default_rng(0), 10, 200, 0.5)


def test_the_same_seed_gives_the_same_trace() -> None:
    trace = benchmark_trace(1000, 16.0, 215, 121, Arrivals.POISSON, lengths=LengthDistribution.SHAREGPT)
    again = benchmark_trace(1000, 16.0, 215, 121, Arrivals.POISSON, lengths=LengthDistribution.SHAREGPT)
    assert len(trace) == 1000 and np.array_equal(trace.output_len, again.output_len)
