"""Shapes of XLA HLO text: `f32[8,16]{1,0}`, tuples `(s32[], bf16[4,8]{1,0})`, dynamic bounds `f32[<=8]`.

The element types and their widths follow XLA's PrimitiveType (xla/xla_data.proto); sub-byte types count
as one byte per element, a conservative bound.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from armillary.errors import SpecError

# bytes per element of XLA's primitive types (xla_data.proto PrimitiveType)
ELEMENT_BYTES = {
    "pred": 1, "s2": 1, "s4": 1, "s8": 1, "s16": 2, "s32": 4, "s64": 8, "u2": 1, "u4": 1, "u8": 1, "u16": 2,
    "u32": 4, "u64": 8, "f16": 2, "bf16": 2, "f32": 4, "f64": 8, "c64": 8, "c128": 16, "f8e4m3fn": 1,
    "f8e5m2": 1, "f8e4m3": 1, "f8e4m3b11fnuz": 1, "f8e4m3fnuz": 1, "f8e5m2fnuz": 1, "f8e3m4": 1, "f8e8m0fnu": 1,
    "f4e2m1fn": 1, "token": 0, "opaque": 0,
}

_ARRAY = re.compile(r"([a-z][a-z0-9]*)\[([^\]]*)\](\{[^}]*\})?")
_COMMENT = re.compile(r"/\*.*?\*/")


@dataclass(frozen=True, slots=True)
class ArrayShape:
    """One array: element type, dimensions and layout (minor-to-major; empty if not printed)."""

    dtype: str
    dims: tuple[int, ...]
    layout: tuple[int, ...] = ()

    @property
    def elements(self) -> int:
        return math.prod(self.dims)

    @property
    def bytes(self) -> int:
        return self.elements * ELEMENT_BYTES[self.dtype]


@dataclass(frozen=True, slots=True)
class Shape:
    """An instruction's result: one array, or a tuple of them (`leaves` flattened, `elements_leaves` the number
    of leaves of each top-level element, so `get-tuple-element` can find its part)."""

    leaves: tuple[ArrayShape, ...]
    is_tuple: bool = False
    elements_leaves: tuple[int, ...] = ()  # leaves per top-level tuple element
    bytes: int = -1  # of all leaves (computed when not given)

    def __post_init__(self) -> None:
        if self.bytes < 0:
            object.__setattr__(self, "bytes", sum(leaf.bytes for leaf in self.leaves))

    @property
    def array(self) -> ArrayShape:
        """The array of a non-tuple shape (the first leaf of a tuple)."""
        return self.leaves[0] if self.leaves else ArrayShape("token", ())

    def element(self, index: int) -> Shape:
        """Top-level element `index` of a tuple shape."""
        if not self.is_tuple or not self.elements_leaves:
            return self
        start = sum(self.elements_leaves[:index])
        return Shape(self.leaves[start:start + self.elements_leaves[index]])


@lru_cache(maxsize=65536)
def parse_shape(text: str) -> Shape:
    """The shape printed as `text` (shapes repeat: cached)."""
    text = _COMMENT.sub("", text).strip()
    leaves = []
    for match in _ARRAY.finditer(text):
        dtype = match.group(1)
        if dtype not in ELEMENT_BYTES:
            raise SpecError(f"HLO shape {text!r}: unknown element type {dtype!r}; known: {sorted(ELEMENT_BYTES)}")
        dims = tuple(int(d.strip().lstrip("<=")) for d in match.group(2).split(",") if d.strip())
        layout = match.group(3)
        minor = tuple(int(x) for x in re.findall(r"\d+", layout.split(":")[0])) if layout else ()
        leaves.append(ArrayShape(dtype, dims, minor))
    if text.startswith("("):
        return Shape(tuple(leaves), True, _top_level_counts(text))
    if not leaves:
        raise SpecError(f"HLO shape {text!r}: expected e.g. f32[8,16]{{1,0}} or a tuple (s32[], f32[4])")
    return Shape(tuple(leaves[:1]))


def _top_level_counts(text: str) -> tuple[int, ...]:
    """Leaves in each top-level element of a tuple shape `( ... )`."""
    counts: list[int] = []
    depth = 0
    current = 0
    for match in re.finditer(r"[()]|[a-z][a-z0-9]*\[", text):
        token = match.group(0)
        if token == "(":
            depth += 1
            if depth == 2:
                current = 0
        elif token == ")":
            depth -= 1
            if depth == 1:
                counts.append(current)
        elif depth == 1:
            counts.append(1)
        else:
            current += 1
    return tuple(counts)
