"""Variants of one run file for `armillary compare RUN.yaml --variant ...`: each a named set of `--set`
style overrides (`specs/overrides.py`), applied to the same run file."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from armillary.errors import SpecError
from armillary.specs.overrides import parse_override

# a comma that starts the next FIELD=VALUE (a value may hold commas: a YAML list [4, 4])
_NEXT = re.compile(r",(?=\s*[A-Za-z_][\w.]*\s*=)")
# an optional leading NAME: before the first FIELD=
_NAMED = re.compile(r"^\s*([\w.+-]+)\s*:\s*(?=[A-Za-z_][\w.]*\s*=)")


@dataclass(frozen=True)
class Variant:
    name: str
    overrides: tuple[tuple[str, Any], ...]


def parse_variant(text: str) -> Variant:
    """'strategy.tp=4,strategy.pp=2' -> the two overrides, named by the text; 'tp4: strategy.tp=4' is
    named tp4."""
    named = _NAMED.match(text)
    body = text[named.end():] if named else text
    parts = [p for p in _NEXT.split(body) if p.strip()]
    if not parts:
        raise SpecError(f"variant {text!r}: expected FIELD=VALUE[,FIELD=VALUE...], e.g. strategy.tp=4,strategy.pp=2")
    try:
        overrides = tuple(parse_override(p) for p in parts)
    except SpecError as err:
        raise SpecError(f"variant {text!r}: {err}") from None
    return Variant(named.group(1) if named else body.strip(), overrides)


def variant_of(value: str | Mapping[str, Any]) -> Variant:
    """A variant from its text or from a mapping of dotted fields to values (named `k=v,...`); a value of
    '+N%' in a mapping is read as in --set."""
    if isinstance(value, str):
        return parse_variant(value)
    if not value:
        raise SpecError("variant: give at least one FIELD=VALUE")
    items = tuple((k, parse_override(f"{k}={v}")[1] if isinstance(v, str) else v) for k, v in value.items())
    return Variant(",".join(f"{k}={v}" for k, v in value.items()), items)
