"""Speculative decoding (Leviathan et al. 2023; Chen et al. 2023): a drafter proposes `k` tokens, the
target model scores the k + 1 positions in one pass, and accepts a prefix of the draft.

With a per-token acceptance rate a (i.i.d., Leviathan et al. 2023 §3.1, eq. 1) a step yields
(1 - a^(k+1)) / (1 - a) tokens in expectation. A step costs the target's verification pass over k + 1 new
tokens per sequence plus k drafter passes, each `draft_cost` of a target decode step (a draft model:
about its size ratio; MTP or EAGLE heads: about one layer of the target, 1 / layers). At a = 0 a step
still yields one token but costs at least a plain decode step: speculation never helps then.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from armillary.errors import SpecError
from armillary.estimate.inference import ReplicaModel
from armillary.numerics import Array


@dataclass(frozen=True)
class Speculation:
    draft_tokens: int  # k, proposed per step
    acceptance: float  # per-token acceptance rate in [0, 1]
    draft_cost: float  # one drafter pass / one target decode step

    def __post_init__(self) -> None:
        if self.draft_tokens < 1 or not 0 <= self.acceptance <= 1 or self.draft_cost < 0:
            raise SpecError(f"speculation: draft_tokens >= 1, acceptance in [0, 1], draft_cost >= 0; got "
                            f"{self.draft_tokens}, {self.acceptance}, {self.draft_cost}")


def expected_tokens(k: Array, acceptance: Array) -> Array:
    """Tokens a verification step yields in expectation: sum_{i=0..k} a^i = (1 - a^(k+1)) / (1 - a)
    (Leviathan et al. 2023, eq. 1); k + 1 at a = 1."""
    a = np.asarray(acceptance, dtype=float)
    powers = np.arange(np.max(k) + 1)
    terms = np.where(powers[None, :] <= np.asarray(k).reshape(-1, 1), a.reshape(-1, 1) ** powers[None, :], 0.0)
    out = terms.sum(axis=1)
    return out if np.ndim(k) or np.ndim(acceptance) else float(out[0])


def decode_step(r: ReplicaModel, sequences: float, new: float, past: float) -> float:
    """One pass of `sequences` sequences with `new` tokens each over `past` cached ones: layers, attention
    (the decode form: verification runs as decode does) and the LM head over every scored position (the
    replica model's own costs)."""
    tokens = float(r.tokens_time(sequences * new).total)
    core, remote = r.attention_time(r.attention(new, past, sequences, decode=True), sequences * past)
    return tokens + float(np.sum(core)) + float(np.sum(remote)) + float(r.head_time(sequences * new))


@dataclass(frozen=True)
class SpeculativeStep:
    step_s: float  # drafting + verification
    tokens: float  # expected tokens per sequence and step
    plain_step_s: float  # a decode step without speculation

    @property
    def time_per_token_s(self) -> float:
        return self.step_s / self.tokens

    @property
    def speedup(self) -> float:
        return self.plain_step_s / self.time_per_token_s


def speculative_step(r: ReplicaModel, sequences: int, past: float, spec: Speculation) -> SpeculativeStep:
    """Cost and yield of one speculative decode step of a batch of `sequences` at `past` cached tokens."""
    k = spec.draft_tokens
    plain = decode_step(r, float(sequences), 1.0, past)
    verify = decode_step(r, float(sequences), float(k + 1), past)
    step = verify + k * spec.draft_cost * plain
    return SpeculativeStep(step, float(expected_tokens(k, spec.acceptance)), plain)
