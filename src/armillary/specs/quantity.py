"""Pydantic field types that accept numbers in SI or strings with units ("80 GiB", "2 TB/s")."""

from __future__ import annotations

from typing import Annotated

from pydantic import BeforeValidator, Field

from armillary.units import parse_quantity


def _as(dimension: str) -> BeforeValidator:
    return BeforeValidator(lambda v: parse_quantity(v, dimension) if isinstance(v, str) else v)


Bytes = Annotated[float, _as("bytes"), Field(gt=0)]
BytesOrZero = Annotated[float, _as("bytes"), Field(ge=0)]  # a size that may be zero
BytesPerSecond = Annotated[float, _as("bytes_per_s"), Field(gt=0)]
FlopPerSecond = Annotated[float, _as("flop_per_s"), Field(gt=0)]
Seconds = Annotated[float, _as("s"), Field(ge=0)]
Fraction = Annotated[float, Field(gt=0, le=1)]
