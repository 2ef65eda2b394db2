"""The validation harness run from Python: every measured row predicted and compared (`validate`)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

# the validation harness loads on the first call that needs it
if TYPE_CHECKING:
    from armillary.validation.run import RowResult


def validate(path: Path | str | None = None,
             kinds: Iterable[str] = ("training", "inference", "collective", "memory"),
             progress: Callable[[list[dict[str, str]]], Iterable[dict[str, str]]] = iter) -> list[RowResult]:
    """Every measured row of `kinds` in the validation CSV (default: the shipped copy), predicted and
    compared, or skipped with the reason."""
    from armillary.validation.run import DEFAULT_CSV
    from armillary.validation.run import validate as validate_rows

    return validate_rows(DEFAULT_CSV if path is None else path, kinds, progress)
