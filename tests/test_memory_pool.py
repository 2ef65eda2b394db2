"""A disaggregated memory pool (`System.memory_pool`) as the offload destination: ASTRA-sim 2.0's remote-memory
modes, its transfer time (latency + bytes / the device's share of the bandwidth) checked by hand, its capacity,
the offload of weights, gradients and MoE experts, and the direction of ASTRA-sim 2.0's finding."""

from __future__ import annotations

import math

import pytest
from conftest import gpt
from pydantic import ValidationError

from armillary import load_model, load_system, parameters, run_simulation
from armillary.estimate.run import estimate_training_run
from armillary.specs.memory import MemoryPool, PoolKind
from armillary.specs.strategy import Strategy
from armillary.specs.system import System
from armillary.specs.workload import Training

MODEL = gpt(8, 1024, 16)  # 8 layers
WORK = Training(seq_len=1024, global_batch=64)


def pooled(system: System, **pool: object) -> System:
    """`system` with a memory pool (512 GB/s, 1 TiB, pooled unless given)."""
    spec = {"kind": "pooled", "capacity": "1 TiB", "bandwidth": "512 GB/s", **pool}
    return system.model_copy(update={"memory_pool": MemoryPool.model_validate(spec)})


def no_host(system: System) -> System:
    """`system` whose device has HBM only (no second tier)."""
    device = system.device
    return system.model_copy(update={"device": device.model_copy(update={"memory": device.memory[:1]})})


def test_astra_sim_remote_memory_keys_are_read():
    """ASTRA-sim's remote-memory config (inputs/remote_memory/analytical/*.json at tag 2.0.0): latency in ns,
    bandwidth in GB/s; its three expansion modes map to the three kinds, NO_MEMORY_EXPANSION is refused."""
    pool = MemoryPool.model_validate({"memory-type": "MEMORY_POOL", "remote-mem-latency": 500,
                                      "remote-mem-bw": 512, "capacity": "1 TiB"})
    assert (pool.kind, pool.latency, pool.bandwidth) == (PoolKind.POOLED, pytest.approx(5e-7), 512e9)
    node = MemoryPool.model_validate({"memory-type": "PER_NODE_MEMORY_EXPANSION", "remote-mem-latency": 0,
                                      "remote-mem-bw": 128, "num-nodes": 8, "num-npus-per-node": 8,
                                      "capacity": "1 TiB"})
    assert node.kind is PoolKind.PER_NODE and node.bandwidth == 128e9
    npu = MemoryPool.model_validate({"memory-type": "PER_NPU_MEMORY_EXPANSION", "remote-mem-bw": 512,
                                     "capacity": "1 TiB"})
    assert npu.kind is PoolKind.PER_DEVICE
    with pytest.raises(ValidationError, match="NO_MEMORY_EXPANSION: give no memory_pool"):
        MemoryPool.model_validate({"memory-type": "NO_MEMORY_EXPANSION", "capacity": "1 TiB"})


def test_each_kind_splits_the_pool_among_the_devices_that_share_it():
    """16 devices in 2 nodes of 8: pooled 512/16 GB/s and 1/16 of the capacity each, per node 512/8, per device
    512; reached over the InfiniBand dimension, at most its 400 Gb/s x 0.987 per device."""
    base = load_system("dgx-h100", 16)
    rates = {kind: pooled(base, kind=kind).offload_path for kind in ("pooled", "per_node", "per_device")}
    assert rates["pooled"].rate == pytest.approx(32e9) and rates["pooled"].capacity == pytest.approx(2**40 / 16)
    assert rates["per_node"].rate == pytest.approx(64e9) and rates["per_node"].capacity == pytest.approx(2**40 / 8)
    assert rates["per_device"].rate == pytest.approx(512e9) and rates["per_device"].capacity == 2**40
    over_ib = pooled(base, kind="per_device", network=1).offload_path
    assert over_ib.rate == pytest.approx(0.987 * 50e9) and over_ib.network == 1
    host = base.offload_path  # no pool: the device's second tier (PCIe 5.0 x16, 64 GB/s x 0.8)
    assert (host.rate, host.latency) == (pytest.approx(51.2e9), 0.0)
    with pytest.raises(ValidationError, match=r"memory_pool.network 2: the system has network dimensions 0..1"):
        System.model_validate({**base.model_dump(), "memory_pool": {"kind": "pooled", "capacity": 1e12,
                                                                    "bandwidth": 1e11, "network": 2}})


def _estimate(system: System, **strategy: object):
    return estimate_training_run(MODEL, system, Strategy.model_validate(strategy), WORK)


def test_weight_and_optimizer_offload_to_the_pool_by_hand():
    """8 devices, dp 8, one stage of 8 layers, 8 micro-batches each. Pooled: 512/8 = 64 GB/s a device, 2 us an
    access. Weights (bf16: 2 P bytes) fetched before every forward and backward, one access a layer:
    2 x 8 x (2P / 64e9 + 8 x 2 us). The optimizer step streams 42 bytes a parameter (bf16: read grad 4, Adam 28,
    master to model 6, zero the grad 4) over the same path: 42 P / 64e9 + 8 x 2 us."""
    system = pooled(load_system("dgx-h100", 8), latency="2 us")
    p = parameters(MODEL)
    r = _estimate(system, offload={"weights": True, "optimizer": True})
    assert float(r.memory_tier2.weights) == pytest.approx(2 * p)
    transfers = 2 * 8 * (2 * p / 64e9 + 8 * 2e-6)
    assert float(r.offload_s) == pytest.approx(transfers, rel=1e-9)
    assert float(r.breakdown.optimizer) == pytest.approx(42 * p / 64e9 + 8 * 2e-6, rel=1e-9)
    window = float(r.step_time_s - r.breakdown.optimizer - r.breakdown.offload_stall)
    assert float(r.breakdown.offload_stall) == pytest.approx(max(0.0, transfers - window), abs=1e-12)
    assert float(r.tier2_capacity_bytes) == pytest.approx(2**40 / 8)


def test_gradient_offload_by_hand_and_its_rule():
    """ZeRO-Offload: the fp32 gradient buffer (4 P bytes) leaves HBM but two layers' of it, each micro-batch's
    gradients go out once: 8 x (4P / 64e9 + 8 x 2 us) more on the path; without optimizer offload refused."""
    system = pooled(load_system("dgx-h100", 8), latency="2 us")
    p = parameters(MODEL)
    without = _estimate(system, offload={"optimizer": True})
    with_grads = _estimate(system, offload={"optimizer": True, "gradients": True})
    assert float(with_grads.memory_tier2.gradients) == pytest.approx(4 * p)
    assert float(with_grads.memory_hbm.gradients) == pytest.approx(2 * 4 * p / 8)
    assert float(with_grads.offload_s - without.offload_s) == pytest.approx(8 * (4 * p / 64e9 + 8 * 2e-6), rel=1e-9)
    with pytest.raises(ValidationError, match=r"offload\.gradients needs offload\.optimizer"):
        Strategy(offload={"gradients": True})


def test_expert_offload_moves_only_the_routed_experts():
    """Mixtral 8x7B, ep 8 on 8 devices: a device holds one expert of each of 32 layers, 3 x 4096 x 14336
    parameters each, 2 bytes; offloaded, they are fetched before every forward and backward (32 accesses)."""
    model, system = load_model("mixtral-8x7b"), pooled(load_system("dgx-h100", 8), latency="1 us")
    work = Training(seq_len=4096, global_batch=16)
    experts = 32 * 3 * 4096 * 14336 * 2.0
    base = estimate_training_run(model, system, Strategy(ep=8, recompute="full"), work)
    r = estimate_training_run(model, system, Strategy(ep=8, recompute="full", offload={"experts": True}), work)
    assert float(r.memory_tier2.weights) == pytest.approx(experts)
    assert float(base.memory_hbm.weights - r.memory_hbm.weights) == pytest.approx(experts * (1 - 2 / 32))
    assert float(r.offload_s) == pytest.approx(2 * 2 * (experts / 64e9 + 32 * 1e-6), rel=1e-9)


def test_the_pool_capacity_is_checked():
    system = pooled(load_system("dgx-h100", 8), capacity="8 GiB")  # 1 GiB a device
    r = _estimate(system, offload={"weights": True, "optimizer": True})
    assert not r.feasible
    assert any("memory pool (pooled) needs more than this device's share" in x for x in r.infeasible_reasons)
    assert any("GiB each device may hold there" in x for x in r.infeasible_reasons)
    bare = _estimate(no_host(load_system("dgx-h100", 8)), offload={"optimizer": True})
    assert "offload needs a second memory tier or a memory pool: the system has neither" in bare.infeasible_reasons


def test_a_pool_reached_over_a_network_dimension_waits_for_its_traffic():
    """Over dimension 1 (InfiniBand), 16 devices in 2 nodes: the path is busy with the step's scale-out bytes at
    the dimension's rate besides the pool's own transfers, which run at min(512 GB/s, 0.987 x 50 GB/s)."""
    system = pooled(load_system("dgx-h100", 16), kind="per_device", network=1)
    r = _estimate(system, offload={"weights": True})
    p, rate = parameters(MODEL), 0.987 * 50e9
    transfers = 2 * 4 * 2 * p / rate  # 4 micro-batches a device at dp 16
    assert float(r.traffic.scale_out_bytes) > 0
    assert float(r.offload_s) == pytest.approx(transfers + float(r.traffic.scale_out_bytes) / rate, rel=1e-9)
    assert float(_estimate(system).offload_s) == 0.0  # no offload: nothing waits


def test_the_simulator_agrees_with_the_estimate_on_pool_offload():
    system = pooled(load_system("dgx-h100", 16), latency="1 us")
    strategy = {"tp": 2, "pp": 2, "offload": {"weights": True, "optimizer": True, "gradients": True}}
    sim = run_simulation(MODEL, system, strategy, WORK)
    assert abs(sim.difference) < 1e-9


def test_astra_sim_2_direction_a_pool_lets_a_model_that_does_not_fit_train():
    """ASTRA-sim 2.0 §V-B (direction only: the paper's figures could not be read, docs/memory-pool.md): a 70B
    model on 8 H100s without host memory does not fit in HBM, offloading needs somewhere to go; with a pool of
    enough bandwidth (per device, 512 GB/s) its weights, gradients and optimizer states move there and it trains,
    within 10% of the same step with HBM that held everything (no offload, capacities ignored)."""
    model, work = load_model("llama3-70b"), Training(seq_len=4096, global_batch=64)
    bare = no_host(load_system("dgx-h100", 8))
    strategy = Strategy(tp=8, recompute="full", sequence_parallel=True, attention="flash")
    offload = Strategy.model_validate({**strategy.model_dump(), "offload": {"weights": True, "optimizer": True,
                                                                          "gradients": True}})
    assert not estimate_training_run(model, bare, strategy, work).feasible
    assert not estimate_training_run(model, bare, offload, work).feasible
    pool = pooled(bare, kind="per_device", bandwidth="512 GB/s", capacity="1 TiB")
    r = estimate_training_run(model, pool, offload, work)
    assert r.feasible
    ideal = estimate_training_run(model, bare, strategy, work)  # infeasible, but its time is what HBM would take
    assert float(r.step_time_s) < 1.1 * float(ideal.step_time_s)


def test_astra_sim_2_direction_per_device_expansion_beats_one_shared_pool_as_devices_grow():
    """ASTRA-sim's MEMORY_POOL serves every NPU from one queue, PER_NPU_MEMORY_EXPANSION gives each its own:
    at 512 GB/s each (its example configs), weak scaling a 70B model with offloaded states over 8 to 128 H100s,
    the shared pool's step grows with the devices (its share falls as 512/N GB/s) while the per-device
    expansion's stays; the shared pool's slowdown grows with N."""
    model = load_model("llama3-70b")
    strategy = Strategy(tp=8, recompute="full", sequence_parallel=True, attention="flash", zero=1,
                        offload={"weights": True, "optimizer": True, "gradients": True})
    slowdown = []
    for n in (8, 32, 128):
        work = Training(seq_len=4096, global_batch=2 * n)
        times = {kind: float(estimate_training_run(model, pooled(load_system("dgx-h100", n), kind=kind), strategy,
                                                   work).step_time_s) for kind in ("pooled", "per_device")}
        slowdown.append(times["pooled"] / times["per_device"])
    assert slowdown[0] >= 1.0 and slowdown[0] < slowdown[1] < slowdown[2]
    assert slowdown[2] > 2.0 and math.isfinite(slowdown[2])
