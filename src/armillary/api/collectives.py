"""One collective over a system's devices, as nccl-tests reports it (`collective`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

from armillary import defaults
from armillary.api.inputs import SystemLike
from armillary.errors import SpecError
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system

# the collective sweeps load on the first call that needs them
if TYPE_CHECKING:
    from armillary.comm.sweep import SweepRow


@overload
def collective(op: Collective | str, size_bytes: float, system: SystemLike, gpus: int | None = ...,
               algorithm: Algorithm | str = ..., composition: Composition | str = ...) -> SweepRow: ...


@overload
def collective(op: Collective | str, size_bytes: Sequence[float] | np.ndarray, system: SystemLike,
               gpus: int | None = ..., algorithm: Algorithm | str = ...,
               composition: Composition | str = ...) -> list[SweepRow]: ...


def collective(op: Collective | str, size_bytes: float | Sequence[float] | np.ndarray, system: SystemLike,
               gpus: int | None = defaults.COLLECTIVE_GPUS,
               algorithm: Algorithm | str = Algorithm.AUTO,
               composition: Composition | str = Composition.AUTO) -> SweepRow | list[SweepRow]:
    """One collective over `gpus` devices of `system` (inner dimensions filled first), as nccl-tests reports
    it: time, algbw, busbw, how the dimensions were composed and the algorithm / protocol chosen per
    dimension. A sequence of sizes gives a row per size."""
    try:
        operation, chosen, composed = Collective(op), Algorithm(algorithm), Composition(composition)
    except ValueError:
        raise SpecError(f"op {op!r} / algorithm {algorithm!r} / composition {composition!r}: op is one of "
                        f"{', '.join(c.value for c in Collective if c is not Collective.SEND_RECV)}; algorithm "
                        f"one of {', '.join(a.value for a in Algorithm)}; composition one of "
                        f"{', '.join(c.value for c in Composition)}") from None
    if operation is Collective.SEND_RECV:
        raise SpecError("op: send_recv is point-to-point, not a collective")
    from armillary.comm.sweep import collective_sweep, group_of

    sysm = load_system(system, gpus)
    gpus = sysm.devices if gpus is None else gpus  # as everywhere: None is the system's own size
    try:
        raw = np.asarray(size_bytes)
    except ValueError:  # a ragged nesting
        raw = np.asarray(None)
    if raw.dtype.kind not in "iuf" or raw.ndim > 1:  # strings, bools, None, objects are not sizes
        raise SpecError(f"size_bytes: expected a number of bytes or a sequence of them, got {size_bytes!r}")
    sizes = np.atleast_1d(raw.astype(float))
    try:
        rows = collective_sweep(operation, sizes, group_of(sysm, gpus), sysm, chosen, composed)
    except ValueError as err:
        raise SpecError(str(err)) from None
    return rows if np.ndim(size_bytes) else rows[0]
