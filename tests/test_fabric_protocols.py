"""The protocols a fabric's collective library offers (NetworkDimension.protocols, Fabric.protocols): a protocol
left out is never chosen, by a phase or by a ring through the dimension, and a dimension that states no
restriction costs exactly as before. Sources: NCCL src/graph/tuning.cc ncclTopoTuneModel (NCCL_PROTO parsed per
communicator; a protocol left out gets bandwidth 0 for every collective and algorithm) and Google's TCPXO profile
for A3 Mega (google/nccl-plugin-gpudirect-tcpxo tcpxo_scripts/nccl-env-profile.sh: NCCL_PROTO=Simple,LL128)."""

import math

import numpy as np
import pytest
from pydantic import ValidationError

from armillary.comm.algorithms import PROTOCOLS, dimension_cost, dimension_options, ring_protocols
from armillary.comm.compose import compose
from armillary.comm.fabrics import Fabric, fabric_dimension, fabrics, with_fabric
from armillary.comm.sweep import collective_sweep, group_of
from armillary.plan.placement import Placement
from armillary.specs.communication import Algorithm, Collective, Composition
from armillary.specs.loading import load_system
from armillary.specs.network import PROTOCOL_NAMES, NetworkDimension
from armillary.units import KIB, MIB


def _chosen(system, gpus: int, sizes: list[float], composition: Composition = Composition.AUTO) -> list[str]:
    """The protocol each size runs on the outermost dimension the group spans (`collective_sweep` labels)."""
    group = group_of(system, gpus)
    rows = collective_sweep(Collective.ALL_REDUCE, np.array(sizes, float), group, system, Algorithm.AUTO,
                            composition)
    return [r.dimensions[-1].partition("/")[2] for r in rows]


def _all_protocols(system):
    return system.model_copy(update={"network": tuple(d.model_copy(update={"protocols": PROTOCOL_NAMES})
                                                      for d in system.network)})


def test_tcpxo_runs_ll128_where_the_library_would_run_ll():
    """2 A3 Mega nodes (16 H100s), all-reduce of 64 KiB: with every protocol offered the tree runs LL there (NCCL's
    tuner: LL's 0.6 / 3.4 of the Simple step wins at small sizes); Google's TCPXO profile sets
    NCCL_PROTO=Simple,LL128, so the same system runs LL128, and so does a flat ring through both dimensions."""
    a3 = load_system("gcp-a3-mega", 16)
    assert _chosen(_all_protocols(a3), 16, [64 * KIB]) == ["LL"]
    assert _chosen(a3, 16, [64 * KIB]) == ["LL128"]
    assert _chosen(a3, 16, [1 * KIB, 64 * KIB], Composition.FLAT_RING) == ["LL128", "LL128"]
    assert _chosen(_all_protocols(a3), 16, [1 * KIB], Composition.FLAT_RING) == ["LL"]


def test_tcpxo_fabric_restricts_every_dimension_of_the_job():
    """NCCL_PROTO holds per communicator, inside the node too: on the TCPXO fabric both of a DGX H100's
    dimensions offer LL128 and Simple; on InfiniBand (no restriction stated) the dimensions are the same objects."""
    dgx = load_system("dgx-h100", 16)
    on_tcpxo = with_fabric(dgx, "gcp-tcpxo")
    assert [d.protocols for d in on_tcpxo.network] == [("LL128", "Simple")] * 2
    assert fabric_dimension("gcp-tcpxo").protocols == ("LL128", "Simple")
    on_ib = with_fabric(dgx, "infiniband-ndr")
    assert on_ib.network[0] is dgx.network[0]
    assert all(d.protocols == PROTOCOL_NAMES for d in on_ib.network)


def test_only_sourced_fabrics_restrict():
    """Every fabric that states no NCCL_PROTO offers all three protocols; the one that does names its source."""
    for name in fabrics():
        offered = fabric_dimension(name).protocols
        if name == "gcp-tcpxo":
            assert offered == ("LL128", "Simple")
            assert "nccl-env-profile.sh" in load_system("gcp-a3-mega").network[-1].sources["protocols"]
        else:
            assert offered == PROTOCOL_NAMES, name


def test_ring_keeps_every_protocol_slot_and_blocks_only_where_it_crosses():
    """ring_protocols gives one cost per protocol in PROTOCOLS order; one not offered is infinite where the ring
    takes steps across the dimension (latency_scale > 0) and nothing where it takes none; the offered ones cost
    what they cost with every protocol offered (bit for bit)."""
    dim = load_system("gcp-a3-mega", 16).network[-1].sized(2)
    full = dim.model_copy(update={"protocols": PROTOCOL_NAMES})
    args = (Collective.ALL_REDUCE, np.array([8.0, MIB, MIB]), np.array([16.0, 16.0, 16.0]))
    scale = np.array([0.1, 0.1, 0.0])
    costs = ring_protocols(*args, dim, 1e12, latency_scale=scale)
    reference = ring_protocols(*args, full, 1e12, latency_scale=scale)
    assert len(costs) == len(PROTOCOLS)
    assert list(np.asarray(costs[0].time)) == [math.inf, math.inf, 0.0]
    for k in (1, 2):
        assert np.array_equal(costs[k].time, reference[k].time)
    scalar = ring_protocols(Collective.ALL_REDUCE, 8.0, 16.0, dim, 1e12)
    assert scalar[0].time == math.inf and math.isfinite(scalar[1].time)


def test_phase_options_leave_the_protocol_out():
    """A phase chooses among the offered protocols only: on A3 Mega's NVLink (LL128, Simple) the ring's 4 KiB
    all-gather over 8 GPUs runs LL128 where with every protocol offered it runs LL (LL's 0.6 us NVLink hop
    against LL128's 1.9, tuning.cc); NVLS runs Simple (tuning.cc), still offered."""
    nvlink = load_system("gcp-a3-mega", 8).network[0]
    full = nvlink.model_copy(update={"protocols": PROTOCOL_NAMES})
    options = dimension_options(Collective.ALL_REDUCE, 4.0 * KIB, 8.0, nvlink, 1e12)
    assert {PROTOCOLS[int(o.protocol)].name for o in options} == {"LL128", "Simple"}
    assert len(dimension_options(Collective.ALL_REDUCE, 4.0 * KIB, 8.0, full, 1e12)) == len(options) + 1
    for dim, name in ((nvlink, "LL128"), (full, "LL")):
        best = dimension_cost(Collective.ALL_GATHER, 4.0 * KIB, 8.0, dim, 1e12, Algorithm.RING)
        assert PROTOCOLS[int(best.protocol)].name == name


def test_sweep_over_group_sizes_matches_one_configuration_at_a_time():
    """A sweep whose groups span one node at some points and two at others (the ring's unoffered slot is 0
    where the ring does not cross the NICs) gives what each configuration gives alone, and no NaN."""
    system = load_system("gcp-a3-mega", 32)
    sizes = [8.0, 64 * KIB, 16 * MIB]
    for gpus in (8, 16, 32):
        group = group_of(system, gpus)
        swept = collective_sweep(Collective.ALL_GATHER, np.array(sizes), group, system)
        for size, row in zip(sizes, swept, strict=True):
            alone = collective_sweep(Collective.ALL_GATHER, np.array([size]), group, system)[0]
            assert math.isfinite(row.time_s) and row.time_s == pytest.approx(alone.time_s, rel=1e-12)


@pytest.mark.parametrize("names", [["LL", "LL64"], ["ll128"], ["Simple", "Simple"], []])
def test_unknown_protocol_is_refused_naming_the_field(names):
    dim = load_system("dgx-h100").network[-1].model_dump()
    with pytest.raises(ValidationError, match="protocols"):
        NetworkDimension.model_validate({**dim, "protocols": names})


def test_fabric_protocols_are_checked_and_sourced():
    base = {"family": "roce", "description": "x", "nic_bandwidth": "400 Gb/s", "dimension_of": "dgx-h100",
            "sources": {"nic_bandwidth": "s"}}
    with pytest.raises(ValidationError, match=r"protocols: \['LL64'\]"):
        Fabric.model_validate({**base, "protocols": ["LL64"], "sources": {"nic_bandwidth": "s", "protocols": "s"}})
    with pytest.raises(ValidationError, match=r"protocols needs a source"):
        Fabric.model_validate({**base, "protocols": ["Simple"]})
    sourced = {"nic_bandwidth": "s", "protocols": "s"}
    simple = Fabric.model_validate({**base, "protocols": ["Simple"], "sources": sourced})
    assert simple.protocols == ("Simple",)


def test_a_sweep_whose_groups_cross_the_restricted_dimension_at_some_points():
    """Three dimensions, only the outermost restricted (Simple, LL128): a sweep whose group spans the inner two
    at one point and all three at the other gives, point by point, what each configuration gives alone (the
    flat ring's LL slot is infinite only where the ring crosses the restricted dimension), with no NaN."""
    dgx = load_system("dgx-h100", 16)
    spine = dgx.network[-1].model_copy(update={"name": "spine", "size": 2, "protocols": ("LL128", "Simple")})
    system = dgx.model_copy(update={"network": (*dgx.network, spine)})
    spans = ([8.0, 8.0], [2.0, 2.0], [1.0, 2.0])
    for op in (Collective.ALL_REDUCE, Collective.ALL_GATHER):
        for size in (8.0, 64 * KIB, 16 * MIB):
            for composition in (Composition.AUTO, Composition.FLAT_RING):
                swept = compose(op, np.array([size, size]), Placement(tuple(np.array(s) for s in spans)), system,
                                Algorithm.AUTO, None, composition)
                for k in (0, 1):
                    alone = compose(op, size, Placement(tuple(s[k] for s in spans)), system, Algorithm.AUTO, None,
                                    composition)
                    assert np.isfinite(swept.time[k])
                    assert float(swept.time[k]) == pytest.approx(float(alone.time), rel=1e-12), (op, size, k)
