"""The algorithm, composition and protocol chosen change per fabric and size where the library's do. Each
case names its source: NCCL's tuner (src/graph/tuning.cc) or a measured sweep of the shared validation set
(validation/data/measurements.csv) with the fit that records it (presets/network/fabrics.yaml)."""

import numpy as np
import pytest

from armillary.comm.explain import explain_sweep
from armillary.comm.fabrics import fabric_dimension, fabrics, rack_scale, with_fabric
from armillary.comm.sweep import collective_sweep, group_of
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.units import GIB, KIB, MIB


def chosen(system_name: str, gpus: int, sizes: list[float], fabric: str | None = None,
           nvls: bool = True) -> list[tuple[str, str, str, float]]:
    """(composition, algorithm on the outermost tier spanned, protocol, busbw GB/s) per size."""
    system = load_system(system_name, gpus)
    if fabric is not None or not nvls:
        system = with_fabric(system, fabric or "infiniband-ndr", nvlink_reduction=nvls,
                             across_racks=rack_scale(load_system(system_name)))
        if fabric is None:  # NVLS off only: keep the system's own scale-out tier
            system = system.model_copy(update={"network": (*system.network[:-1],
                                                           load_system(system_name, gpus).network[-1])})
    group = group_of(system, gpus)
    rows = collective_sweep(Collective.ALL_REDUCE, np.array(sizes, float), group, system)
    why = explain_sweep(Collective.ALL_REDUCE, np.array(sizes, float), group, system)
    return [(r.composition, w["algorithm"], w["protocol"], r.busbw_bytes_per_s / 1e9)
            for r, w in zip(rows, why, strict=True)]


def test_infiniband_tree_on_two_nodes_ring_on_eight_at_4_gib():
    """IB NDR, 8x H100 per node. 2 nodes at 4 GiB: NCCL runs the tree (CO-H100-IBNDR-2N-AR-qoofyk, auto: 466
    GB/s busbw, above the 393 of the NCCL_ALGO=Ring sweep CO-H100-IBNDR-2N-AR-gj-ring). 8 nodes at 4 GiB:
    the ring (NCCL caps the tree per channel beyond 2 nodes, tuning.cc perChMaxTreeBws; measured default
    sweep CO-H100-IBNDR-8N-AR-gj ~320 GB/s). The fix for other fabrics leaves InfiniBand's pipelined tiers:
    64 H100s at 4 GiB stay at >= 300 GB/s busbw, and the pipelined tree still runs them up to 16 MiB."""
    two = chosen("dgx-h100", 16, [4 * GIB])[0]
    assert two[:2] == ("pipelined", "tree") and two[3] > 440
    eight = chosen("dgx-h100", 64, [16 * MIB, 4 * GIB])
    assert eight[0][:2] == ("pipelined", "tree")
    assert eight[1][3] >= 300
    assert Algorithm.TREE in fabric_dimension("infiniband-ndr").algorithms


def test_protocols_switch_ll_ll128_simple_with_size():
    """NCCL tuning.cc: LL (6.6 us base, half the bandwidth) for small messages, LL128 (92%) in between, Simple
    for large ones; on 2 IB nodes at 64 KiB, 16 MiB and 4 GiB."""
    assert [c[2] for c in chosen("dgx-h100", 16, [64 * KIB, 16 * MIB, 4 * GIB])] == ["LL", "LL128", "Simple"]


def test_roce_runs_the_ring_where_infiniband_runs_the_tree():
    """OCI RoCE (fit: tools/calibrate_fabric.py --fabric roce-oci, the 2-node MI300X / B300 / A100 sweeps fit
    the ring at 0.2-4.7%, the tree needs efficiency 0.52): the same 2 H100 nodes run the ring on RoCE and
    the pipelined tree on InfiniBand (CO-H100-IBNDR-2N-AR-qoofyk), at 16 MiB and 1 GiB."""
    roce = chosen("dgx-h100", 16, [16 * MIB, GIB], "roce-oci")
    ib = chosen("dgx-h100", 16, [16 * MIB, GIB], "infiniband-ndr")
    assert all(c[:2] == ("flat_ring", "ring") for c in roce)
    assert all(c[:2] == ("pipelined", "tree") for c in ib)


def test_pollara_runs_rccls_ring():
    """Pollara / RCCL (fit: CO-MI355X-Pollara-OCI-2N-AR 0.1% with the ring, 21% with the tree)."""
    assert all(c[:2] == ("flat_ring", "ring") for c in chosen("mi355x-8", 16, [16 * MIB, 8 * GIB], "pollara"))


def test_efa_v4_runs_the_tree():
    """EFA v4 on p6-b200, 4 nodes (fit: CO-B200-4N, 8.4% with the tree, 21% with the ring alone)."""
    assert chosen("dgx-b200", 32, [4 * GIB], "efa-v4")[0][:2] == ("pipelined", "tree")
    assert chosen("dgx-b200", 32, [4 * GIB], "roce-oci")[0][:2] == ("flat_ring", "ring")


@pytest.mark.parametrize("fabric", ["roce-oci", "infiniband-ndr"])
def test_nvl72_nvls_inside_a_rack_ring_across_racks(fabric):
    """GB200 NVL72: 64 GPUs of one rack reduce in the NVLink switch (NVLS; OCI GB200 2 hosts 857-896 GB/s,
    GB300 16 hosts 900-931 GB/s, above the ring's ~700); across 2 racks the flat ring (OCI GB200 / GB300
    2-3 rack sweeps 660-800 GB/s, the NVLS-tree model 980), whatever the scale-out fabric."""
    inside = chosen("gb200-nvl72", 64, [4 * GIB])[0]
    assert inside[1] == "in_network" and inside[3] > 850
    across = chosen("gb200-nvl72", 128, [4 * GIB], fabric)[0]
    assert across[:2] == ("flat_ring", "ring") and 600 < across[3] < 750
    assert load_system("gb200-nvl72").network[-1].algorithms == (Algorithm.RING,)


def test_nvls_off_is_the_ring_on_one_node():
    """One H200 node at 8 GiB: NVLS by default (CO-H200-NVLS-8-DEF 473 GB/s), the ring with
    NCCL_NVLS_ENABLE=0 (CO-H200-NVLS-8-RING 366 GB/s)."""
    on = chosen("hgx-h200", 8, [8 * GIB])[0]
    off = chosen("hgx-h200", 8, [8 * GIB], nvls=False)[0]
    assert on[1] == "in_network" and off[1] == "ring" and off[3] < on[3]


def test_every_fabric_states_its_sources():
    for name, spec in fabrics().items():
        dim = fabric_dimension(name)
        assert dim.bandwidth > 0 and dim.latency > 0 and 0 < dim.efficiency <= 1, name
        assert "nic_bandwidth" in spec.sources, name


def test_sharp_takes_the_inter_node_phase_for_large_messages_only():
    """IB NDR with SHARP (NCCL CollNet, NCCL_COLLNET_ENABLE=1; tuning.cc: Simple protocol only, so a small
    message stays on the tree's LL): 8 H100 nodes reduce in the switch at 4 GiB, not at 64 KiB."""
    system = with_fabric(load_system("dgx-h100", 64), "infiniband-ndr-sharp")
    group = group_of(system, 64)
    why = explain_sweep(Collective.ALL_REDUCE, np.array([64 * KIB, 4 * GIB]), group, system)
    assert why[0]["algorithm"] == "tree" and why[0]["protocol"] == "LL"
    assert why[1]["algorithm"] == "in_network" and why[1]["protocol"] == "Simple"


def test_gcp_tcpxo_tree_for_all_reduce_ring_for_all_gather():
    """GCP A3 Mega over GPUDirect-TCPXO, 2 nodes: the all-reduce plateau of CO-H100-GCPA3M-2N-AR (338.8 GB/s
    busbw at 8 GiB) exceeds what a ring through 8 x 200 Gb/s NICs per node can carry (200 GB/s), so NCCL ran
    its pipelined tree there (gcp-a3-mega preset, its calibration source); NCCL runs all-gather as a ring
    only (tuning.cc: Tree is an all-reduce algorithm), so the same nodes gather over the flat ring."""
    reduce = chosen("gcp-a3-mega", 16, [8 * GIB])[0]
    assert reduce[:2] == ("pipelined", "tree") and reduce[3] > 300
    system = load_system("gcp-a3-mega", 16)
    why = explain_sweep(Collective.ALL_GATHER, np.array([8 * GIB]), group_of(system, 16), system)
    assert why[0]["algorithm"] == "ring"


def test_gcp_rdma_protocol_switch_follows_its_latency():
    """GCP A4 RDMA (gIB plugin), 2 B200 nodes: its fitted per-step latency (gcp-a4 preset, fit on
    CO-B200-GCPA4-2N-AG: ~235-290 us from 1 KiB to 128 KiB) is far above InfiniBand's, so the all-reduce
    stays on LL (half the bandwidth, the least latency: tuning.cc baseLat / hwLat) up to 16 MiB where the
    same GPUs on InfiniBand NDR have moved to LL128; both reach Simple at 4 GiB."""
    gcp = chosen("gcp-a4", 16, [16 * MIB, 4 * GIB])
    ib = chosen("dgx-b200", 16, [16 * MIB, 4 * GIB], "infiniband-ndr")
    assert gcp[0][2] == "LL" and ib[0][2] == "LL128"
    assert gcp[1][2] == ib[1][2] == "Simple"


def test_nvl72_across_racks_switches_ll_ll128_simple_at_its_own_points():
    """128 GB200 over 2 NVL72 racks (CO-GB200-OCIOKE-32N-AR, NCCL 2.29.2): the flat ring's 252 NVLink hops set
    the floors, LL's ~190-200 us to 64 KiB and LL128's ~290 us from 1 MiB (presets/network/fabrics.yaml
    nvlink_domains.nvl72: 0.725 / 1.1 us per hop, LL128 at most 402 GB/s busbw, fit on that sweep), and Simple
    takes the large messages at the NVLink ring's rate. Measured: 64 KiB 202.9 us, 8 MiB 48.9 GB/s busbw,
    4 GiB 639.7 GB/s. Inside one rack the NVLink hops keep NCCL's figures."""
    rows = chosen("gb200-nvl72", 128, [64 * KIB, 8 * MIB, 4 * GIB], "roce-oci")
    assert [r[2] for r in rows] == ["LL", "LL128", "Simple"]
    assert rows[1][3] == pytest.approx(48.9, rel=0.10) and rows[2][3] == pytest.approx(639.7, rel=0.10)
    system = with_fabric(load_system("gb200-nvl72", 128), "roce-oci", across_racks=True)
    group = group_of(system, 128)
    time = collective_sweep(Collective.ALL_REDUCE, np.array([64 * KIB]), group, system)[0].time_s
    assert time * 1e6 == pytest.approx(202.9, rel=0.10)
    assert load_system("gb200-nvl72", 64).network[0].protocol_latency == {}


def test_a_protocol_figure_names_a_protocol():
    """protocol_latency / ring_busbw take NCCL's protocol names; another is refused naming them."""
    dim = load_system("dgx-h100").network[0].model_dump()
    with pytest.raises(ValueError, match="LL, LL128, Simple"):
        type(load_system("dgx-h100").network[0]).model_validate({**dim, "protocol_latency": {"ll": 1e-6}})
