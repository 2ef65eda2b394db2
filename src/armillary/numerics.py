"""Scalar-or-array helpers shared by every cost formula.

A formula takes floats for one configuration or numpy arrays for a sweep (lesson 2 of the architecture
notes). These helpers keep one configuration in plain Python (skipping numpy's per-call overhead) and
broadcast over arrays; the results are the same either way.
"""

from __future__ import annotations

import functools
import math
import os
import sys

import numpy as np

Array = np.ndarray | float


def is_array(*values: object) -> bool:
    """Whether any of `values` is a numpy array (a sweep) rather than one configuration's number."""
    for v in values:  # noqa: SIM110 (a loop, not any(generator): called for every formula's branch)
        if isinstance(v, np.ndarray):
            return True
    return False


# the exact types of one configuration's numbers, tested by `type(x) in` before the slower isinstance
_PLAIN = frozenset((float, int, bool, np.float64, np.bool_))


def any_true(x: Array | bool) -> bool:
    """np.any that stays in plain Python for a single configuration."""
    if type(x) in _PLAIN or isinstance(x, bool | np.bool_ | float | int):
        return bool(x)
    if type(x) is np.ndarray:  # the non-zero count: x.any() and np.any go through numpy's Python-level wrapper
        # (_methods._any), ~0.7 us more a call; truthiness alike (NaN counts, -0.0 does not)
        return bool(np.count_nonzero(x))
    return bool(np.any(x))


def ratio_or_zero(a: Array, b: Array) -> Array:
    """a / b where b > 0, else 0 (broadcasting, no division warnings)."""
    if type(b) in _NUMBERS and type(a) in _NUMBERS:  # one configuration: the same quotient in plain Python
        return a / float(b) if b > 0 else 0.0
    b = np.asarray(b, dtype=float)
    return np.where(b > 0, a / np.where(b > 0, b, 1.0), 0.0)


def where(cond: Array | bool, a: Array, b: Array) -> Array:
    """np.where that stays in plain Python for a single configuration."""
    kind = type(cond)  # an exact type test: the hottest helper, called for every formula's branch
    if kind is bool or kind is np.bool_:
        return a if cond else b
    return np.where(cond, a, b)


# what `maximum` and `minimum` compare in plain Python: floats, ints and numpy floating scalars (the
# exact common types first, then isinstance for the rest)
_NUMBERS = frozenset((float, int, np.float64))
_NUMBER = float | int | np.floating


def maximum(a: Array, b: Array) -> Array:
    if (type(a) in _NUMBERS or isinstance(a, _NUMBER)) and (type(b) in _NUMBERS or isinstance(b, _NUMBER)):
        return a if a >= b else b
    return np.maximum(a, b)


def minimum(a: Array, b: Array) -> Array:
    if (type(a) in _NUMBERS or isinstance(a, _NUMBER)) and (type(b) in _NUMBERS or isinstance(b, _NUMBER)):
        return a if a <= b else b
    return np.minimum(a, b)


def nan_maximum(a: Array, b: Array) -> Array:
    """np.maximum, in plain Python for one configuration (a NaN wins, as there)."""
    if type(a) in _NUMBERS and type(b) in _NUMBERS:
        return a if a >= b else b if b >= a else math.nan  # type: ignore[operator]
    return np.maximum(a, b)


def all_true(mask: Array) -> bool:
    """np.all that stays in plain Python for one configuration."""
    if type(mask) is np.ndarray:  # (the non-zero count, as in any_true)
        return np.count_nonzero(mask) == mask.size
    return bool(np.all(mask)) if is_array(mask) else bool(mask)


def logical_not(mask: Array) -> Array:
    """np.logical_not that stays in plain Python for one configuration."""
    return ~np.asarray(mask, dtype=bool) if is_array(mask) else not mask


def divides(a: Array, b: Array) -> Array:
    """a divides b (a <= b and b mod a = 0, within rounding)."""
    if not is_array(a, b):
        return bool(b % a < 1e-9 and a <= b)
    return np.asarray((np.abs(np.mod(b, a)) < 1e-9) & (a <= b))


def whole(x: Array) -> Array:
    """x is a whole number (within rounding)."""
    if not is_array(x):
        return bool(abs(float(x) - round(float(x))) < 1e-9)
    return np.abs(x - np.round(x)) < 1e-9


def all_of(*masks: Array) -> Array:
    """Elementwise and of booleans or boolean arrays."""
    if not is_array(*masks):
        return all(bool(k) for k in masks)
    return functools.reduce(np.logical_and, masks)


def any_of(*masks: Array) -> Array:
    """Elementwise or of booleans or boolean arrays."""
    if not is_array(*masks):
        return any(bool(k) for k in masks)
    return functools.reduce(np.logical_or, masks)


# glibc's malloc parameters (malloc/malloc.h: M_TRIM_THRESHOLD -1, M_MMAP_THRESHOLD -3). glibc serves a request
# of at least the mmap threshold (128 KiB at start, raised up to 32 MiB as such blocks are freed) with a fresh
# mapping, and hands freed memory at the heap's top back to the system past the trim threshold (twice the
# mmap threshold): a sweep's block makes temporaries of a few hundred KiB to a few MiB, one after another, and
# each then comes in as fresh pages, faulted in and zeroed by the kernel (mallopt(3), "M_MMAP_THRESHOLD",
# "M_TRIM_THRESHOLD"). Setting either fixes both (no dynamic threshold).
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
SWEEP_MMAP_THRESHOLD = 32 * 2**20  # glibc's ceiling for the mmap threshold on 64-bit (DEFAULT_MMAP_THRESHOLD_MAX)
SWEEP_TRIM_THRESHOLD = 64 * 2**20  # freed heap kept for the next block, at most (twice the above, as glibc sets)
_sweep_allocator: list[bool] = []  # the outcome, once set


def keep_sweep_memory() -> bool:
    """Keep freed memory in the process for the next block's temporaries (glibc's malloc only; once per
    process; not where MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_ or GLIBC_TUNABLES's glibc.malloc.*
    chose them). The values computed are the same: only where numpy's arrays come from changes. Whether it
    was set."""
    if not _sweep_allocator:
        _sweep_allocator.append(_set_sweep_allocator())
    return _sweep_allocator[0]


def _set_sweep_allocator() -> bool:
    chosen = any(k in os.environ for k in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")) or (
        "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""))  # the environment chose glibc's policy
    if sys.platform != "linux" or chosen:
        return False
    import ctypes  # here, not at import: only a search needs it

    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's C library
    except (OSError, AttributeError):  # not glibc (or no mallopt): its own policy stays
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    return bool(mallopt(_M_MMAP_THRESHOLD, SWEEP_MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD,
                                                                                 SWEEP_TRIM_THRESHOLD))
