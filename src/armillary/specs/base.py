"""Common base for user-facing specifications: frozen, strict about unknown fields."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class Spec(BaseModel):
    """A frozen, validated description. Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)
