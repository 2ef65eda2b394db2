"""EFA as NCCL's own tuner costs it: the latency aws-ofi-nccl reports to NCCL (src/platform-aws.cpp
platform_data_map: 75 us on p4d / p5 / p5e, 35 us on p5en / p6-b200) added by tuning.cc to every network step,
twice for Simple; the presets of EFA systems no sweep calibrated, and the out-of-fit model of the one sweep
efa-v4 was fitted on, take those figures."""

from __future__ import annotations

import numpy as np
import pytest

from armillary.comm.fabrics import fabrics, nccl_network_hops
from armillary.comm.sweep import collective_sweep, group_of
from armillary.specs.communication import Collective
from armillary.specs.loading import load_system
from armillary.validation.collective_residuals import CALIBRATIONS, read_refits, uncalibrated_fields

US = 1e-6


def test_nccl_adds_the_plugins_latency_to_each_network_step():
    """Hand calculation from NCCL tuning.cc: hwLat[NET] ring LL / LL128 / Simple = 2.7 / 4.0 / 14 us, plus
    latencyInter once (and once more for Simple, the flush). NCCL's own IB transport reports 0."""
    p6 = nccl_network_hops(35 * US)
    assert p6["latency"] == pytest.approx(84 * US)
    assert p6["protocol_latency"] == pytest.approx({"LL": 37.7 * US, "LL128": 39 * US})
    ib = nccl_network_hops(0.0)
    assert ib["latency"] == pytest.approx(14 * US)
    assert ib["protocol_latency"] == pytest.approx({"LL": 2.7 * US, "LL128": 4.0 * US})


@pytest.mark.parametrize(("system", "fabric"), [("aws-p4d", "efa-v1"), ("aws-p5", "efa-v2"), ("aws-p5e", "efa-v2")])
def test_the_efa_presets_state_nccls_cost_with_the_plugins_latency(system, fabric):
    """The system presets' EFA dimension agrees with its fabric's net plugin latency (p5e shares p5's entry of
    aws-ofi-nccl's table, efa-v2): one source for the 75 us."""
    owner = fabrics()[fabric]
    assert owner.dimension_of in (system, "aws-p5")
    assert owner.net_plugin_latency == pytest.approx(75 * US)
    hops = nccl_network_hops(owner.net_plugin_latency)
    dim = load_system(system).network[-1]
    assert dim.latency == pytest.approx(hops["latency"])
    assert dim.protocol_latency == pytest.approx(hops["protocol_latency"])


def test_a_small_all_reduce_over_two_p5_pays_two_efa_steps():
    """2 x p5 (16 H100): an 8-byte all-reduce crosses the network twice (up and down NCCL's tree, or the ring's two
    inter-node steps), each at least LL's 77.7 us: at least 155 us (it was 23 us with NCCL's 14 us alone)."""
    system = load_system("aws-p5", 16)
    time = collective_sweep(Collective.ALL_REDUCE, np.array([8.0]), group_of(system, 16), system)[0].time_s
    assert time >= 2 * 77.7 * US


def test_efa_v4_out_of_fit_is_nccls_own_cost_of_the_fabric():
    """The one sweep efa-v4 was fitted on is scored out of fit with the fabric as NCCL's tuner sees it (84 us a
    Simple step), not InfiniBand's 14 us: there the bandwidth-bound sizes (1-16 GiB) land within 10%."""
    fit = next(c for c in CALIBRATIONS if c.fabric == "efa-v4")
    fields = uncalibrated_fields(fit)
    assert fields["latency"] == pytest.approx(84 * US) and fields["efficiency"] == 0.9
    refits = read_refits()
    for n in range(16, 21):
        record = refits[f"CO-B200-4N-{n}"]
        assert record["how"] == "uncalibrated"
        assert abs(float(record["error"])) < 0.10  # type: ignore[arg-type]
