"""Network presets of issue 15: the two-tier form against the network list, cloud fabrics against their
published per-node NIC figures, NCCL's tree efficiency, calibration round trips, the SuperPOD's spine and
the TPU pods' three ring axes."""

import pytest

from armillary.comm.algorithms import dimension_cost
from armillary.comm.calibration import Measurement, fit_efficiency
from armillary.comm.collectives import collective
from armillary.comm.sweep import group_of
from armillary.specs.communication import Algorithm, Collective
from armillary.specs.loading import load_system
from armillary.specs.system import System
from armillary.validation.gpu_words import system_preset_for

GiB = 2**30


def test_the_two_tier_form_loads_as_the_network_list():
    listed = load_system("dgx-a100", 16)
    up, out = (d.model_dump(exclude={"size"}, exclude_defaults=True) for d in listed.network)
    two_tier = System.model_validate({"name": listed.name, "device": listed.device, "devices_per_node": 8,
                                      "nodes": 2, "scale_up": up, "scale_out": out})
    assert two_tier.model_dump(exclude={"sources"}) == listed.model_dump(exclude={"sources"})


@pytest.mark.parametrize(("preset", "node_gbps"), [("gcp-a3-mega", 1600), ("gcp-a4", 3200), ("aws-p5", 3200),
                                                   ("aws-p5e", 3200), ("aws-p4d", 400), ("azure-nd-h100-v5", 3200)])
def test_cloud_fabrics_carry_the_published_gpu_networking_per_node(preset, node_gbps):
    """GCP 'Networking and GPU machines', AWS EC2 EFA guide, Microsoft ND H100 v5: GPU NICs per node x rate."""
    system = load_system(preset, 16)
    nic = system.network[1]
    assert system.devices_per_node * nic.bandwidth / nic.shared_by == pytest.approx(node_gbps * 1e9 / 8)
    assert nic.sources.get("bandwidth")


@pytest.mark.parametrize(("gpu", "preset"), [
    ("H100 80GB HBM3 (8/VM; GCP A3 Mega per repository name)", "gcp-a3-mega"),
    ("B200 (GCP a4-highgpu-8g, 8/node)", "gcp-a4"), ("A100 (AWS p4dn/p4d.24xlarge, 8/node)", "aws-p4d"),
    ("H100 (p5.48xlarge)", "aws-p5"), ("H200 (p5e.48xlarge)", "aws-p5e"), ("ND H100 v5", "azure-nd-h100-v5"),
    ("H100 80GB HBM3 SXM (HGX, 8/node)", "dgx-h100")])
def test_cloud_instance_text_names_its_preset(gpu, preset):
    assert system_preset_for(gpu) == preset


def test_the_tree_runs_at_its_own_efficiency():
    """Double binary tree over 4 ranks: busiest rank sends min(p, 4)/2 n = 2n at tree_efficiency x bandwidth."""
    nic = load_system("dgx-h100", 32).network[1].model_copy(
        update={"size_efficiency": None, "tree_size_efficiency": None, "efficiency": 0.9, "tree_efficiency": 0.5,
                "algorithms": (Algorithm.TREE,)})
    cost = dimension_cost(Collective.ALL_REDUCE, GiB, 4, nic, 1e12, Algorithm.TREE)
    assert float(cost.transfer) == pytest.approx(2 * GiB / (0.5 * nic.bandwidth))
    ring = dimension_cost(Collective.ALL_REDUCE, GiB, 4, nic.model_copy(update={"algorithms": (Algorithm.RING,)}),
                          1e12, Algorithm.RING)
    assert float(ring.transfer) == pytest.approx(2 * 3 / 4 * GiB / (0.9 * nic.bandwidth))


def test_fit_efficiency_recovers_the_ring_efficiency_that_made_the_times():
    truth = load_system("dgx-h100", 32).with_dimension(1, efficiency=0.8)
    group = group_of(truth, 32)
    points = [Measurement(n, float(collective(Collective.ALL_REDUCE, n, group, truth, Algorithm.RING).cost.time))
              for n in (GiB / 4, GiB, 4 * GiB)]
    fitted = fit_efficiency(points, Collective.ALL_REDUCE, 32, truth.with_dimension(1, efficiency=0.95),
                            Algorithm.RING)
    assert fitted.network[1].efficiency == pytest.approx(0.8, rel=1e-3)


def test_an_oversubscribed_spine_halves_the_all_to_all_that_crosses_it():
    """SuperPOD: 8 GPUs x 32-node rail leaves x 4 SUs; at 2:1 the spine's share of an all-to-all over all
    1024 GPUs moves at half the rate (the phases run at once, the spine's is the slowest)."""
    pod = load_system("dgx-superpod-h100", 1024)
    assert pod.sizes == (8, 32, 4)
    tapered = pod.with_dimension(2, oversubscription=2.0)
    group = group_of(pod, 1024)
    full = collective(Collective.ALL_TO_ALL, GiB, group, pod).dimensions[2]
    half = collective(Collective.ALL_TO_ALL, GiB, group, tapered).dimensions[2]
    assert float(half.transfer) == pytest.approx(2 * float(full.transfer))


def test_a_tpu_pod_all_reduce_is_bounded_by_its_first_axis():
    """16 x 16 x 16 rings: the x axis all-reduces the whole buffer (2 x 15/16 n at 0.78 x 100 GB/s); the
    pipelined axes never beat it, and they finish within the sum of the three phases."""
    pod = load_system("tpu-v4-pod", 4096)
    assert pod.sizes == (16, 16, 16)
    got = collective(Collective.ALL_REDUCE, GiB, group_of(pod, 4096), pod)
    x_axis = 2 * 15 / 16 * GiB / (0.78 * 100e9)
    assert x_axis < float(got.cost.time) < 1.2 * x_axis
