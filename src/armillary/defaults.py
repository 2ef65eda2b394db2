"""What "default" means, in one place: the Python API's keyword defaults and the command line's options
both read these, so a question asked either way gets the same answer."""

from __future__ import annotations

from typing import Any

# The base strategy of a search when none is given: every field the space does not vary comes from it.
# FlashAttention-2 is what current training stacks run (Megatron-Core, NeMo, torchtitan, llm-foundry);
# `estimate` takes the Strategy spec's own defaults (standard attention) because there the user states
# a strategy.
SEARCH_BASE_STRATEGY: dict[str, Any] = {"attention": "flash"}
SEARCH_TOP = 10  # strategies kept
SEARCH_BLOCK_POINTS = 262144  # points per block of the array evaluation (`search.run.search` chunk)
SEQ_LEN = 2048  # tokens per sample of a training search given no workload file
INPUT_LEN = 2048  # prompt tokens of an inference search
OUTPUT_LEN = 256  # generated tokens of an inference search
SERVE_DURATION_S = 60.0  # seconds of Poisson arrivals when serving at a rate
MAX_RATE_SEEDS = 3  # seeds of the arrivals a max-rate search averages (mean and range)
COLLECTIVE_GPUS = 8  # ranks of `armillary collective` (one node of the usual presets)
