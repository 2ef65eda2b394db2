"""Sweeps of the shared nccl-tests data that its own record flags, and the rows of a sweep that a larger message
beats (start-up or warm-up cost, not the fabric): what the collective rows leave out."""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence

from armillary.validation.collective_reading import best_of_runs, message_bytes, time_scale

# Sweeps whose rows the shared data's own record flags as not the fabric's behaviour, with its words. Of a flagged
# sweep, the rows a larger message of the same sweep beats (`monotone_rows`) are left out, skipped naming the
# caveat; nothing else is excluded. An unflagged sweep's slow size is the fabric as measured (GCP A4's 2 MiB
# all-gather: 50 warm-up iterations stated, and the in-place run repeats the hump).
FLAGGED_SWEEPS = {"CO-B200-4N": "the shared data README flags it: 'small-message B200 points look like warm-up'"}


def sweep_of(row_id: str) -> str:
    """The measured sweep a row belongs to: its id without the running number."""
    return re.sub(r"-\d+$", "", row_id)


def monotone_rows(rows: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """The rows of one sweep whose time no larger message beats: a larger message is never faster, so a size
    measured slower than a larger one carries start-up or warm-up cost (nccl-tests' first size; a benchmark
    without warm-up iterations), not the fabric's latency."""
    def seconds(row: dict[str, str]) -> float:
        size, value = float(message_bytes(row)), best_of_runs(row, float(row["value"]))[0]
        if row["metric"].lower().startswith("time"):
            return value * time_scale(row)[1]
        return size / value  # busbw or algbw: time up to the sweep's constant bus factor
    timed = sorted(((float(message_bytes(r)), seconds(r), r) for r in rows
                    if r["metric"].lower().startswith(("time", "busbw", "algbw"))), key=lambda x: x[0])
    kept, fastest_above = [], float("inf")
    for _, t, row in reversed(timed):
        if t <= fastest_above * (1 + 1e-9):
            kept.append(row)
        fastest_above = min(fastest_above, t)
    return kept[::-1]


@functools.cache
def flagged_rows() -> dict[str, str]:
    """Row id -> caveat, for the rows of FLAGGED_SWEEPS that a larger message of their sweep beats."""
    from armillary.validation.run import read_rows  # the harness reads this module: on first use

    out = {}
    rows = read_rows()
    for sweep, caveat in FLAGGED_SWEEPS.items():
        mine = [r for r in rows if r.get("kind") == "collective" and sweep_of(r["id"]) == sweep]
        kept = {r["id"] for r in monotone_rows(mine)}
        out.update({r["id"]: caveat for r in mine if r["id"] not in kept})
    return out
