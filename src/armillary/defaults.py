"""What "default" means, in one place: the Python API's keyword defaults and the command line's options
both read these, so a question asked either way gets the same answer."""

from __future__ import annotations

from typing import Any

# The strategy every call and command starts from for the fields a user leaves out: the Strategy spec's own
# defaults (tp = pp = cp = 1, standard attention, no sequence parallelism, ZeRO 0, no recomputation), for
# `estimate`, `simulate`, `serve` and the base of a search alike. A training search then varies attention
# (flash, and flash3 where the device has it), sequence parallelism, ZeRO, recomputation, micro-batch and the
# layout over its space (`search.space.StrategySpace`); an inference search's figures do not depend on the
# attention kernel. A run that does not fit says which of `FIT_CHANGES` makes it fit.
STRATEGY: dict[str, Any] = {}
SEARCH_BASE_STRATEGY = STRATEGY  # the fields a search's space does not vary
# What an out-of-memory training estimate tries, in this order, each step on top of the ones before (cheapest
# in step time first: FlashAttention keeps no s x s scores, sequence parallelism shards the norms' and
# dropouts' activations over tp, ZeRO-1 shards the optimizer states over dp, then recomputation, then more
# model parallelism); `estimate.fit` reports the first that fits
FIT_CHANGES: tuple[dict[str, Any], ...] = (
    {"attention": "flash"}, {"sequence_parallel": True}, {"zero": 1}, {"recompute": "selective"},
    {"recompute": "full"}, {"pp": "x2"}, {"tp": "x2"},
)
SEARCH_TOP = 10  # strategies kept
SEARCH_BLOCK_POINTS = 262144  # points per block of the array evaluation (`search.run.search` chunk)
SEQ_LEN = 2048  # tokens per sample of a training search given no workload file
INPUT_LEN = 2048  # prompt tokens of an inference search
OUTPUT_LEN = 256  # generated tokens of an inference search
SERVE_DURATION_S = 60.0  # seconds of Poisson arrivals when serving at a rate
MAX_RATE_SEEDS = 3  # seeds of the arrivals a max-rate search averages (mean and range)
COLLECTIVE_GPUS = 8  # ranks of `armillary collective` (one node of the usual presets)
