"""How much of a communication stays on the critical path when compute can hide it."""

from __future__ import annotations

from armillary.numerics import Array, maximum


def exposed(comm: Array, hidden_behind: Array, overlap: Array) -> Array:
    """Communication left on the critical path: all of it (overlap 0), or what compute cannot hide
    (overlap 1): max(0, T_comm - T_overlappable) (docs/formulas.md §2.3)."""
    return maximum(0.0, comm - overlap * hidden_behind)
