"""Shared test fixtures: small GPT-style specs built inline so tests do not depend on presets."""

from __future__ import annotations

import os

import pytest
from hypothesis import settings

from armillary.specs.model import Model
from armillary.validation.run import RowResult

# Property tests draw the same examples on every run, so a commit that passes here passes in CI; set
# HYPOTHESIS_PROFILE=explore to draw new ones while hunting bugs.
settings.register_profile("reproducible", derandomize=True)
settings.register_profile("explore", derandomize=False)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "reproducible"))

_SHIPPED_RESULTS: dict[str, RowResult] = {}


def shipped_results() -> dict[str, RowResult]:
    """Every shipped validation row of `validate()`'s kinds, run once per test session and keyed by id (the
    set takes about 80 s of CPU; the tests that need all of it share one run)."""
    if not _SHIPPED_RESULTS:
        from armillary.validation.run import validate

        _SHIPPED_RESULTS.update((r.id, r) for r in validate())
    return _SHIPPED_RESULTS


def gpt(layers: int, hidden: int, heads: int, vocab: int = 51200, **kw: object) -> Model:
    """A Megatron GPT: GeLU 4h MLP, LayerNorm, learned positions, biases, dropout, tied embeddings."""
    return Model(name=f"gpt-{layers}x{hidden}", layers=layers, hidden=hidden, heads=heads, ffn=4 * hidden,
                      vocab=vocab, mlp="gelu", norm="layernorm", position="learned", linear_bias=True,
                      dropout=True, tied_embeddings=True, max_seq_len=2048, **kw)


@pytest.fixture
def gpt22b() -> Model:
    return gpt(48, 6144, 64)


@pytest.fixture
def gpt175b() -> Model:
    return gpt(96, 12288, 96)


def on_nodes(size, per_node):
    """A group of `size` ranks, `per_node` in each node of a two-dimension (node, rails) network."""
    from armillary.plan.placement import Placement

    return Placement((per_node, size / per_node))


def with_bandwidth_scaled(system, scale):
    """`system` with every network dimension's bandwidth times `scale`."""
    return system.model_copy(update={"network": tuple(d.model_copy(update={"bandwidth": d.bandwidth * scale})
                                                      for d in system.network)})


def one_second_per_iteration(new, past, emitting):
    """A serving iteration cost of one second each, for traces checked by hand (`new`: one iteration's new
    tokens per sequence, or iterations as columns)."""
    import numpy as np

    return np.ones(np.atleast_2d(np.asarray(new).T).T.shape[1])


def hand_trace(*requests):
    """A serving trace of (arrival s, input tokens, output tokens) requests."""
    import numpy as np

    from armillary.serving.trace import Trace

    arrival, input_len, output_len = (np.array(x) for x in zip(*requests, strict=True))
    return Trace(arrival.astype(float), input_len, output_len)
