"""Common base for user-facing specifications: frozen, strict about unknown fields."""

from __future__ import annotations

import re

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Spec(BaseModel):
    """A frozen, validated description. Unknown fields are errors, so typos never pass silently."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False, allow_inf_nan=False)


class NamedByPatterns(Spec):
    """A profile recognised in free text (a software stack, a serving engine) by regular expressions; when
    several match, the longest match wins."""

    matches: tuple[str, ...] = Field(min_length=1, description="regular expressions (case-insensitive) that "
                                     "recognise it in a framework description; the longest match wins")

    @field_validator("matches")
    @classmethod
    def _compiles(cls, patterns: tuple[str, ...]) -> tuple[str, ...]:
        for p in patterns:
            try:
                re.compile(p)
            except re.error as err:
                raise ValueError(f"{p!r} is not a regular expression: {err}") from None
        return patterns

    def match_length(self, framework: str) -> int:
        """Characters of `framework` that the longest of the patterns matches (0: none)."""
        spans = (m.end() - m.start() for p in self.matches if (m := re.search(p, framework, re.I)))
        return max(spans, default=0)
