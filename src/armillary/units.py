"""SI helpers and named constants. No logic beyond unit conversion.

Everything inside armillary is SI: seconds, bytes, FLOP, FLOP/s, bytes/s. Data files may write
quantities with units ("80 GiB", "2.039 TB/s", "312 TFLOP/s", "5 us", "200 Gb/s"); `parse_quantity`
turns them into SI numbers at the input boundary.
"""

from __future__ import annotations

import re

KILO, MEGA, GIGA, TERA, PETA = 1e3, 1e6, 1e9, 1e12, 1e15
KIB, MIB, GIB, TIB = 2**10, 2**20, 2**30, 2**40
MICROSECOND, MILLISECOND = 1e-6, 1e-3

_PREFIX = {"": 1.0, "k": KILO, "K": KILO, "M": MEGA, "G": GIGA, "T": TERA, "P": PETA,
           "Ki": KIB, "Mi": MIB, "Gi": GIB, "Ti": TIB}
_TIME = {"s": 1.0, "ms": MILLISECOND, "us": MICROSECOND, "µs": MICROSECOND, "ns": 1e-9}
# unit stem -> (dimension, factor to SI)
_STEMS = {"B": ("bytes", 1.0), "b": ("bytes", 1 / 8), "FLOP": ("flop", 1.0)}
_QUANTITY = re.compile(r"^\s*([-+0-9.eE]+)\s*([A-Za-zµ/]*)\s*$")
# datasheet spellings -> ours: "989 TFLOPS", "400 Gbit/s", "50 GB/sec", "2 usec"
_SPELLINGS = ((re.compile(r"FLOPS$|FLOPs$|flops$"), "FLOP/s"), (re.compile(r"/sec$|/second$"), "/s"),
              (re.compile(r"bits?(?=/s$|ps$|$)"), "b"), (re.compile(r"^(usec|microseconds?)$"), "us"),
              (re.compile(r"^(msec|milliseconds?)$"), "ms"), (re.compile(r"^(sec|seconds?)$"), "s"))


def _spelled(unit: str, dimension: str) -> str:
    """A unit as datasheets write it, in our spelling (FLOPS is a rate only where a rate is expected)."""
    for pattern, ours in _SPELLINGS:
        if ours == "FLOP/s" and dimension != "flop_per_s":
            continue
        unit = pattern.sub(ours, unit)
    return unit


def parse_quantity(value: float | int | str, dimension: str) -> float:
    """Convert a number or a string with a unit into SI for `dimension`.

    dimension: "bytes", "bytes_per_s", "flop_per_s" or "s". Plain numbers are taken as SI already.
    Raises ValueError naming the expected units when the string does not fit.
    """
    if isinstance(value, int | float):
        return float(value)
    match = _QUANTITY.match(value)
    if not match:
        raise ValueError(f"cannot read {value!r} as a quantity of {dimension}")
    number, unit = float(match.group(1)), _spelled(match.group(2), dimension)
    if unit == "":
        return number
    if dimension == "s":
        if unit in _TIME:
            return number * _TIME[unit]
        raise ValueError(f"{value!r}: time units are {sorted(_TIME)}")
    per_second = unit.endswith("/s") or unit.endswith("ps")
    stem_with_prefix = unit[:-2] if per_second else unit
    if (dimension.endswith("_per_s")) != per_second:
        raise ValueError(f"{value!r}: expected a quantity of {dimension}")
    for stem, (dim, factor) in _STEMS.items():
        if stem_with_prefix.endswith(stem):
            prefix = stem_with_prefix[: -len(stem)]
            if prefix in _PREFIX and dimension.startswith(dim):
                return number * _PREFIX[prefix] * factor
    raise ValueError(
        f"{value!r}: expected {dimension} such as '80 GiB', '2 TB/s', '200 Gb/s' or '312 TFLOP/s'"
    )
