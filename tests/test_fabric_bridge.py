"""Bridge test for collective rows (issue 41): each row below, as its authors wrote it, is run by the harness
and, separately, stated by hand as an `armillary.api.collective` call on a system built from what the row
says (preset, fabric preset, NICs per GPU, NVL72 racks, NVLS). The two predictions must be equal: a harness
that misreads a column (the fabric, the NIC count, the tray, NVLS) fails here even where paraphrase tests
pass. Sources: nccl-tests issue #309, ml-engineering, nccl issue #527, OCI quick-starts (GB200, GB300, B300,
MI355X), oci-hpc-oke, create-a3mega (12 rows, 9 sources)."""

import pytest

from armillary import api
from armillary.comm.fabrics import with_fabric
from armillary.specs.loading import load_system
from armillary.units import GIB
from armillary.validation.collective_rows import predict_collective

GB = 1e9
ROWS = [
    # (row as written, (preset, GPUs, fabric, NIC bytes/s per GPU or None, NVL72 racks, NVLS on, op, algorithm))
    ({"id": "CO-H100-IBNDR-2N-AR-qoofyk-20", "gpu": "H100 80GB HBM3 SXM (HGX, 8/node), Dell XE9680", "n_gpus": "16",
      "inter_net": "2 nodes x 8x ConnectX-7 InfiniBand NDR 400 Gb/s (1 NIC per GPU); GDR perftest ~396 Gb/s per "
                   "reporter",
      "framework": "nccl-tests all_reduce_perf_mpi -b 8 -e 16g -f 2 -g 1, NCCL 2.26.2+cuda12.8, default algo "
                   "selection (maintainer: NVLSTree used multi-node), NCCL_NET_GDR_LEVEL=1",
      "op": "all_reduce", "msg_bytes": "4194304", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("dgx-h100", 16, "infiniband-ndr", 50 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-H100-GCPA3M-2N-AR-25", "gpu": "H100 80GB HBM3 (8/VM; GCP A3 Mega per repository name)",
      "n_gpus": "16", "inter_net": "GCP A3 Mega, GPUDirect-TCPXO (inferred from repository name; NIC count/speed "
                                   "not stated in source)",
      "framework": "nccl-tests all_reduce_perf -b 8 -e 8G -f 2 -g 1", "op": "all_reduce",
      "msg_bytes": "134217728", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("gcp-a3-mega", 16, "gcp-tcpxo", 25 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-A100-AWSEFA-2N-AR-01", "gpu": "A100 (AWS p4dn/p4d.24xlarge per reporter, 8/node)", "n_gpus": "16",
      "inter_net": "2 instances; AWS EFA via aws-ofi-nccl (FI_PROVIDER=efa, FI_EFA_USE_DEVICE_RDMA=1); EFA "
                   "count/speed not stated",
      "framework": "nccl-tests all_reduce_perf (NCCL 2.9.9 per issue title; NCCL_COLLNET_ENABLE=1 set)",
      "op": "all_reduce", "msg_bytes": "1073741824", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("aws-p4d", 16, "efa-v1", 6.25 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-H200-NVLS-8-RING", "gpu": "H200 SXM (8x node)", "n_gpus": "8", "inter_net": "",
      "framework": "nccl-tests (NCCL 2.27.7)", "op": "all_reduce", "msg_bytes": "8589934592",
      "metric": "busbw, NCCL_NVLS_ENABLE=0 (ring)", "unit": "GB/s"},
     ("hgx-h200", 8, None, None, False, False, "all_reduce", "ring")),
    ({"id": "CO-B200-4N-16", "gpu": "B200 (AWS p6-b200, 8/node)", "n_gpus": "32",
      "inter_net": "8x EFA v4 400 Gb/s per node", "framework": "torch all_reduce_bench.py (NCCL 2.27.7)",
      "op": "all_reduce", "msg_bytes": "1073741824", "metric": "busbw", "unit": "GB/s"},
     ("dgx-b200", 32, "efa-v4", 50 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-GB300-OCI-16N-AR-01", "gpu": "GB300 (OCI BM.GPU.GB300.4: 4 GPUs/host, NVL72 rack)", "n_gpus": "64",
      "inter_net": "16 hosts; RoCE 8 x 400 Gb/s RDMA NICs per 4-GPU host (2 per GPU)",
      "framework": "nccl-tests, NCCL 2.28.7+cuda13.0, NCCL_MNNVL_ENABLE=1, NCCL_NVLS_ENABLE=1",
      "op": "all_reduce", "msg_bytes": "8589934592", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("gb300-nvl72", 64, None, None, False, True, "all_reduce", "auto")),
    ({"id": "CO-GB300-OCI-32N-AR-01", "gpu": "GB300 (OCI BM.GPU.GB300.4: 4 GPUs/host, NVL72 rack)", "n_gpus": "128",
      "inter_net": "32 hosts; RoCE 8 x 400 Gb/s RDMA NICs per 4-GPU host (2 per GPU)",
      "framework": "nccl-tests, NCCL 2.28.7+cuda13.0, NCCL_MNNVL_ENABLE=1, NCCL_NVLS_ENABLE=1, HPC-X "
                   "nccl_rdma_sharp_plugin, NCCL_IB_QPS_PER_CONNECTION=4",
      "op": "all_reduce", "msg_bytes": "8589934592", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("gb300-nvl72", 128, "roce-oci", 100 * GB, True, True, "all_reduce", "auto")),
    ({"id": "CO-GB200-OCI-48N-A2A-01", "gpu": "GB200 (OCI BM.GPU.GB200*.4: 4 B200 GPUs/host, NVL72 rack)",
      "n_gpus": "192", "inter_net": "48 hosts; InfiniBand 4 x 400 Gb/s RDMA per 4-GPU host (GB200.4 / GB200-v2.4 "
                                    "spec; exact variant for these results not stated)",
      "framework": "nccl-tests, NCCL 2.27.3+cuda12.8, NCCL_MNNVL_ENABLE=1, NCCL_NVLS_ENABLE=1, HPC-X 2.21.2 sharp "
                   "plugin, 4 HCAs in NCCL_IB_HCA",
      "op": "alltoall", "msg_bytes": "4294967296", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("gb200-nvl72", 192, "infiniband-ndr", 50 * GB, True, True, "all_to_all", "auto")),
    ({"id": "CO-B300-OCI-2N-AR-01", "gpu": "B300 SXM6 (OCI BM.GPU.B300.8, 8/node)", "n_gpus": "16",
      "inter_net": "2 nodes; RoCE 8 x 2 x 400 Gb/s = 6.4 Tb/s per node (OCI spec table)",
      "framework": "nccl-tests (-g 1 per rank), NCCL 2.28.9+cuda13.1, HPC-X 2.25.1", "op": "all_reduce",
      "msg_bytes": "8589934592", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("dgx-b300", 16, "roce-oci", 100 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-MI355X-Pollara-OCI-4N-AR-01", "gpu": "AMD Instinct MI355X 288GB (OCI BM.GPU.MI355x.v0.8, 8/node)",
      "n_gpus": "32", "inter_net": "4 nodes; AMD Pensando Pollara 400 AI NIC, 8 x 400 Gb/s Ethernet RoCE per node",
      "framework": "rccl-tests (RCCL 2.26.6; amd-anp net plugin)", "op": "all_reduce", "msg_bytes": "8589934592",
      "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("mi355x-8", 32, "pollara", 50 * GB, False, True, "all_reduce", "auto")),
    ({"id": "CO-GB200-OCIOKE-32N-AR-05", "gpu": "GB200 (OCI BM.GPU.GB200-v3.4: 4 GPUs/host, NVL72 racks)",
      "n_gpus": "128", "inter_net": "32 hosts over 2 racks; RoCEv2 L3, 8 x 400 Gb/s RDMA per host (GB200-v3.4 "
                                    "spec in oci-ai-incubations/oci-gpu-quickstarts nvidia/GB200/README-GB200.md)",
      "framework": "nccl-tests all_reduce_perf via OKE Kueue/MPI-operator manifest, NCCL 2.29.2+cuda13.1",
      "op": "all_reduce", "msg_bytes": "128", "metric": "time (out-of-place; latency regime, busbw < 1 GB/s)",
      "unit": "us"},
     ("gb200-nvl72", 128, "roce-oci", 100 * GB, True, True, "all_reduce", "auto")),
    ({"id": "CO-MI300X-OCIOKE-2N-AR-03", "gpu": "AMD Instinct MI300X (OCI BM.GPU.MI300X.8, 8/node)", "n_gpus": "16",
      "inter_net": "2 nodes; RoCE 8 x 400 Gb/s per node (OCI MI300X spec table, oci-gpu-quickstarts)",
      "framework": "rccl-tests (develop:a52452e) all_reduce_perf -b 1G -e 16G (Slurm operator on OKE)",
      "op": "all_reduce", "msg_bytes": "4294967296", "metric": "busbw (out-of-place)", "unit": "GB/s"},
     ("mi300x-8", 16, "roce-oci", 50 * GB, False, True, "all_reduce", "auto")),
]


@pytest.mark.parametrize(("row", "stated"), ROWS, ids=[r["id"] for r, _ in ROWS])
def test_the_harness_prediction_equals_the_row_stated_by_hand(row, stated):
    preset, gpus, fabric, per_gpu, racks, nvls, op, algorithm = stated
    system = load_system(preset, gpus)
    if fabric is not None or not nvls:
        system = with_fabric(system, fabric or "infiniband-ndr", per_gpu, nvls, racks) if fabric else \
            system.model_copy(update={"network": tuple(
                d.model_copy(update={"in_network_reduction": False, "algorithms": ("ring",)})
                for d in system.network)})
    size = float(row["msg_bytes"])
    by_hand = api.collective(op, size, system, gpus, algorithm)
    label, predicted, notes = predict_collective({**row, "intra_net": "", "other_reported": ""})
    expected = by_hand.time_s * 1e6 if label.startswith("time") else by_hand.busbw_bytes_per_s / 1e9
    assert predicted == pytest.approx(expected, rel=1e-9), notes


def test_the_bridge_spans_every_fabric_class():
    assert len(ROWS) >= 12 and {s[2] for _, s in ROWS} >= {"infiniband-ndr", "gcp-tcpxo", "efa-v1", "efa-v4",
                                                          "roce-oci", "pollara", None}
    assert max(float(r["msg_bytes"]) for r, _ in ROWS) >= 8 * GIB
