"""Why a collective runs the way the model says: the composition, algorithm, protocol and channels chosen at
each size, and the times of what it was chosen over (the library's tuner picks the fastest it offers:
NCCL src/graph/tuning.cc ncclTopoGetAlgoTime; docs/formulas.md §1.3, §1.5)."""

from __future__ import annotations

from typing import Any

import numpy as np

from armillary.comm.compose import offered
from armillary.comm.fabrics import all_to_all_slowdown
from armillary.comm.sweep import collective_sweep
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.network import PROTOCOL_NAMES
from armillary.specs.system import System


def explain_sweep(op: Collective, sizes: np.ndarray, group: Placement, system: System,
                  algorithm: Algorithm = Algorithm.AUTO,
                  composition: Composition = Composition.AUTO) -> list[dict[str, Any]]:
    """Per size: the composition and, on the outermost dimension the group spans, the algorithm and protocol
    chosen, the ring channels there, the time of every composition the library offers (pinned ones alone
    where the caller pinned), and a sentence saying why."""
    chosen = collective_sweep(op, sizes, group, system, algorithm, composition)
    options = offered(system, algorithm) if composition is Composition.AUTO else (composition,)
    alternatives: dict[str, list[float]] = {}
    for option in options:
        try:
            alternatives[option.value] = [r.time_s for r in collective_sweep(op, sizes, group, system, algorithm,
                                                                             option)]
        except ValueError:  # this composition cannot run the op here (e.g. no phase algorithm)
            continue
    spanned = [i for i, s in enumerate(group.spans) if float(np.max(s)) > 1]
    top = spanned[-1] if spanned else 0
    channels = system.network[top].channels
    # the protocols every dimension the group spans offers (NetworkDimension.protocols: the job's NCCL_PROTO)
    offered_protocols = [name for name in PROTOCOL_NAMES
                         if all(name in system.network[i].protocols for i in spanned)]
    not_offered = [name for name in PROTOCOL_NAMES if name not in offered_protocols]
    # all-to-all: every peer at once, the NIC under the incast of all remote hosts (comm/fabrics.py)
    incast = float(np.max(all_to_all_slowdown(system, group.spans, top))) if op is Collective.ALL_TO_ALL else 1.0
    out = []
    for k, row in enumerate(chosen):
        label = row.dimensions[top]
        top_algorithm, _, protocol = label.partition("/")
        times = {name: float(t[k]) for name, t in alternatives.items() if np.isfinite(t[k])}
        slower = ", ".join(f"{name} {t * 1e6:.1f} us" for name, t in times.items() if name != row.composition)
        why = (f"{row.composition}: the fastest composition {system.collectives.value} offers over these "
               f"dimensions at this size" + (f" (vs {slower})" if slower else "") if composition is Composition.AUTO
               else f"{row.composition}: pinned")
        why += (f"; on {system.network[top].name}: {top_algorithm} with the {protocol} protocol, the fastest "
                f"(algorithm, protocol) it offers ({', '.join(a.value for a in system.network[top].algorithms)}) "
                f"at this size" if algorithm is Algorithm.AUTO else f"; algorithm {algorithm.value} pinned")
        if not_offered:
            why += (f"; {', '.join(not_offered)} not offered here (the library is set to "
                    f"{', '.join(offered_protocols)}: NetworkDimension.protocols)")
        if incast > 1.0:
            why += (f"; every peer at once (grouped send / receive), so each NIC takes all remote hosts together: "
                    f"the fabric's all-to-all incast slows the transfer there {incast:.3g}x")
        out.append({"algorithm": top_algorithm, "protocol": protocol, "protocols": offered_protocols,
                    "channels": channels,
                    "composition_times_s": times, "incast": incast, "why": why})
    return out
