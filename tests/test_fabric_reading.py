"""Collective rows are read as their authors wrote them: nccl-tests' op names, the compute fabric from the
inter_net column (never a storage or management NIC), NVLS off when NCCL_NVLS_ENABLE=0, NICs per 4-GPU tray on
a GB200 / GB300 NVL72. Each class of misreading has a sentence written here in the style rows use (not copied
from a row) and a negative: the same words in an unrelated clause are not taken."""

import pytest

from armillary.specs.communication import Algorithm, Collective
from armillary.validation.collective_reading import nvls_enabled, pinned_algorithm, read_op
from armillary.validation.collective_rows import predict_collective
from armillary.validation.collective_system import read_system
from armillary.validation.fabric_words import compute_network_text, fabric_family, nic_bandwidth_per_gpu
from armillary.validation.row_columns import Unsupported


def _row(**columns: str) -> dict[str, str]:
    base = {"id": "X-1", "kind": "collective", "gpu": "H100 SXM (8/node)", "n_gpus": "16", "intra_net": "",
            "inter_net": "", "framework": "nccl-tests", "op": "all_reduce", "msg_bytes": str(2**30),
            "metric": "busbw (out-of-place)", "value": "100", "unit": "GB/s", "other_reported": ""}
    return {**base, **columns}


@pytest.mark.parametrize(("text", "op"), [
    ("allreduce", Collective.ALL_REDUCE), ("alltoall", Collective.ALL_TO_ALL),
    ("reducescatter", Collective.REDUCE_SCATTER), ("allgather", Collective.ALL_GATHER),
    ("sendrecv", Collective.SEND_RECV), ("all_reduce_perf -b 8 -e 8G", Collective.ALL_REDUCE),
    ("AllGather (NCCL_ALGO=Ring)", Collective.ALL_GATHER), ("all-to-all", Collective.ALL_TO_ALL),
    ("send/recv", Collective.SEND_RECV)])
def test_nccl_tests_op_names(text, op):
    assert read_op(text) is op


def test_an_op_that_is_not_a_collective_is_refused_naming_the_column():
    with pytest.raises(Unsupported, match=r"^op "):
        read_op("matmul 8192^3")
    row = _row(op="allgather_perf", msg_bytes=str(2**28))
    label, value, _ = predict_collective(row)
    assert label == "busbw [GB/s]" and value > 0


@pytest.mark.parametrize(("text", "family"), [
    ("4 instances, 32 EFA devices of 100 Gbps each via aws-ofi-nccl", "efa"),
    ("8 ConnectX-7 per node on a RoCEv2 rail fabric", "roce"),
    ("2 nodes; 8x Pensando Pollara 400G NICs (Ethernet, RoCE)", "pollara"),
    ("Omni-Path 100 Gb/s, one HFI per GPU", "omni-path"),
    ("GPUDirect-TCPXO, 8 NICs per VM", "tcpxo"),
    ("8x NDR 400 Gb/s InfiniBand HCAs", "infiniband")])
def test_the_fabric_family_comes_from_inter_net(text, family):
    assert fabric_family(compute_network_text(text))[0] == family


def test_nccl_ib_settings_do_not_make_a_roce_row_infiniband():
    """Negative: NCCL_IB_HCA / NCCL_IB_GID_INDEX name the verbs plugin, used on RoCE too."""
    text = compute_network_text("RDMA over Converged Ethernet; NCCL_IB_HCA=mlx5_0,mlx5_1 NCCL_IB_GID_INDEX=3")
    assert fabric_family(text) == ("roce", ())
    assert fabric_family(compute_network_text("NCCL_IB_GID_INDEX=3 set; RoCE v2"))[0] == "roce"


def test_a_storage_or_management_nic_is_never_the_compute_fabric():
    text = "8x 400 Gb/s RoCE for GPUs; Storage: 2x ConnectX-7 InfiniBand 200 Gb/s; BlueField-3 DPU for management"
    kept = compute_network_text(text)
    assert "storage" not in kept and "bluefield" not in kept
    assert fabric_family(kept) == ("roce", ())
    assert nic_bandwidth_per_gpu(kept, 8)[0] == pytest.approx(50e9)
    # negative: the same NIC words in the compute clause are taken
    assert fabric_family(compute_network_text("8x ConnectX-7 InfiniBand 400 Gb/s for compute"))[0] == "infiniband"


@pytest.mark.parametrize(("text", "per_gpu"), [
    ("8 x 400 Gb/s RDMA NICs per node", 50e9),
    ("16 x 400 Gb/s = 6.4 Tb/s per node", 100e9),
    ("4 x 400 Gb/s per 4-GPU host", 50e9),
    ("8x ConnectX-7 NDR 400 Gb/s (1 NIC per GPU)", 50e9),
    ("two 400 Gb/s ports per GPU", None)])
def test_nics_per_gpu(text, per_gpu):
    value, _ = nic_bandwidth_per_gpu(compute_network_text(text), 8)
    assert value == (pytest.approx(per_gpu) if per_gpu else None)


def test_gb200_nics_are_per_four_gpu_tray_not_per_nvl72_rack():
    row = _row(gpu="GB200 NVL72 (4 GPUs per compute tray)", n_gpus="144",
               inter_net="36 trays; 4 x 400 Gb/s InfiniBand per tray")
    reading = read_system(row)
    assert reading.gpu_bandwidth == pytest.approx(50e9)  # 4 NICs / 4 GPUs, never / 72
    assert reading.fabric == "infiniband-ndr"
    assert any("NVLink domain of 72" in a for a in reading.assumptions)


def test_two_to_sixteen_gb200_hosts_stay_inside_one_rack():
    for hosts in (2, 16):
        reading = read_system(_row(gpu="GB200 (4 GPUs/host, NVL72)", n_gpus=str(4 * hosts),
                                   inter_net=f"{hosts} hosts; RoCE 8 x 400 Gb/s per host"))
        assert reading.fabric is None and any("inside one rack" in a for a in reading.assumptions)


def test_nvls_enable_zero_is_nvls_off():
    assert nvls_enabled("nccl-tests, nccl_nvls_enable=0") is False
    assert nvls_enabled("nccl_nvls_enable=1 nccl_mnnvl_enable=1") is True
    assert nvls_enabled("nvls disabled for this run") is False
    assert nvls_enabled("nccl-tests 2.17") is None
    metric = "busbw with nccl_nvls_enable=0 (default algorithm)"
    assert pinned_algorithm("all_reduce", metric) is not Algorithm.IN_NETWORK
    # negative: NVLS named as the algorithm that ran is NVLS on; "NVLS if chosen" pins nothing
    assert pinned_algorithm("all_reduce", "busbw (nvls)") is Algorithm.IN_NETWORK
    assert pinned_algorithm("all_reduce", "busbw, default (nvls if chosen)") is Algorithm.AUTO


def test_nvls_off_is_used_in_the_prediction():
    on = _row(gpu="H200 SXM", n_gpus="8", msg_bytes=str(2**33))
    off = {**on, "framework": "nccl-tests, NCCL_NVLS_ENABLE=0"}
    assert predict_collective(off)[1] < predict_collective(on)[1]
    assert any("NVLS off" in n for n in predict_collective(off)[2])


def test_an_unnamed_fabric_runs_with_a_recorded_assumption_and_plain_ethernet_is_refused():
    _, _, notes = predict_collective(_row(inter_net="2 nodes, network not described"))
    assert any("no compute fabric named" in n for n in notes)
    with pytest.raises(Unsupported, match=r"^inter_net"):
        predict_collective(_row(inter_net="2 nodes over 100 GbE (TCP sockets)"))
    with pytest.raises(Unsupported, match=r"^n_gpus"):
        predict_collective(_row(n_gpus=""))


def test_two_fabrics_named_is_recorded():
    _, _, notes = predict_collective(_row(inter_net="InfiniBand NDR or Ethernet RoCE, 8 x 400 Gb/s per node"))
    assert any("also" in n for n in notes)


def test_a_fabric_stated_in_the_gpu_column_is_read_with_a_note():
    row = _row(gpu="A100-SXM4-40GB, 3 nodes x 8, 4x HDR IB per node", n_gpus="24", inter_net="")
    reading = read_system(row)
    assert reading.fabric == "infiniband-hdr" and reading.gpu_bandwidth == pytest.approx(4 * 25e9 / 8)
    assert any("gpu column" in a for a in reading.assumptions)
    # negative: a GPU text without network words leaves the preset's fabric, as an assumption
    plain = read_system(_row(gpu="A100-SXM4-40GB", n_gpus="24", inter_net=""))
    assert not any("gpu column" in a for a in plain.assumptions)


@pytest.mark.parametrize(("gpu", "inter_net", "name"), [
    ("A100 (p4d.24xlarge)", "2 instances over EFA", "efa-v1"),
    ("H100 (p5.48xlarge)", "4 instances; 32 EFA cards of 100 Gbps each", "efa-v2"),
    ("B200 (p6-b200)", "8 x EFA 400 Gb/s per node", "efa-v4")])
def test_the_efa_generation_follows_the_card(gpu, inter_net, name):
    assert read_system(_row(gpu=gpu, n_gpus="32", inter_net=inter_net)).fabric == name


@pytest.mark.parametrize(("text", "per_gpu"), [
    ("8x 400g ndr ib", 50e9), ("8x 200gbe roce per node", 25e9), ("8x h100 80g ; 8x 400g roce", 50e9),
    ("8 x a100 40g", None), ("8x 400 gb/s per node", 50e9)])
def test_port_speeds_read_as_nic_rates_and_memory_sizes_do_not(text: str, per_gpu: float | None) -> None:
    """"400G" / "200GbE" are port speeds (IEEE 802.3, IBTA); "80G" after a GPU names its memory, not a NIC."""
    from armillary.validation.fabric_words import nic_bandwidth_per_gpu

    assert nic_bandwidth_per_gpu(text, 8)[0] == per_gpu


def test_efa_generation_words_name_efa() -> None:
    from armillary.validation.fabric_words import fabric_family

    assert fabric_family("efav3 16x 200 gb/s per node")[0] == "efa"
