"""HLO import: parsing, work counts from hand calculation, costing and the task graph (no jax needed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from armillary.errors import SpecError
from armillary.ingest.hlo_attrs import called, replica_groups, source_target_pairs, trip_count
from armillary.ingest.hlo_cost import cost_module, placement_of
from armillary.ingest.hlo_parse import parse_hlo, read_hlo
from armillary.ingest.hlo_run import simulate_hlo
from armillary.ingest.hlo_shapes import parse_shape
from armillary.ingest.hlo_work import OpKind
from armillary.specs.loading import load_system

DATA = Path(__file__).parent / "data" / "hlo"


@pytest.fixture(scope="module")
def forms():
    return read_hlo(DATA / "forms.hlo.txt")


@pytest.fixture(scope="module")
def h100():
    return load_system("dgx-h100", 8)


def test_shapes():
    assert parse_shape("bf16[4,32,64]{2,1,0}").bytes == 4 * 32 * 64 * 2
    t = parse_shape("(s32[], f32[3,4]{1,0}, /*index=2*/(u8[5], pred[]))")
    assert t.is_tuple and t.bytes == 4 + 48 + 5 + 1
    assert t.element(2).bytes == 6 and t.element(1).array.dims == (3, 4)
    assert parse_shape("f32[<=8,2]").array.dims == (8, 2)
    with pytest.raises(SpecError, match="unknown element type"):
        parse_shape("q7[2]")


def test_structure(forms):
    assert forms.num_partitions == 8 and forms.entry == "main"
    entry = forms.entry_computation
    assert entry.root.name == "called" and entry.root.opcode == "call"
    assert entry.by_name["gemm"].operands == ("x.1", "w")
    assert entry.by_name["branch"].operands == ("flag", "out", "out")


def test_replica_group_forms(forms):
    e = forms.entry_computation.by_name
    assert replica_groups(e["ags"], 8) == (tuple(range(8)),)  # [1,8]<=[8]
    assert replica_groups(e["rs"], 8) == ((0, 2, 4, 6), (1, 3, 5, 7))  # transposed iota
    assert source_target_pairs(e["cp"]) == ((0, 1), (1, 2), (2, 3), (3, 0))
    body = forms.computations["body"].by_name
    assert replica_groups(body["ar"], 8) == ((0, 1, 2, 3), (4, 5, 6, 7))
    mesh = parse_hlo("ENTRY %m {\n  %p = f32[8]{0} parameter(0)\n  ROOT %a = f32[8]{0} all-reduce(%p), "
                     "replica_groups=mesh['x'=2,'y'=4] {'x'}, to_apply=%m\n}\n")
    assert replica_groups(mesh.entry_computation.root, 8) == ((0, 4), (1, 5), (2, 6), (3, 7))


def test_trip_count_from_induction_variable(forms):
    assert trip_count(forms.entry_computation.by_name["loop"], forms) == 5


def test_work_by_hand(forms, h100):
    kinds = cost_module(forms, h100).by_kind
    assert kinds[OpKind.DOT].flop == 2 * 4 * 32 * 128 * 64  # 2MNK
    # convolution: 2 x 8 input x 16 output features x batch 2 x, per spatial dimension, the (output, tap)
    # pairs inside the input: 16 x 3 less the 2 taps on the padding (XLA's HloCostAnalysis convention)
    assert kinds[OpKind.CONVOLUTION].flop == 2 * 8 * 16 * 2 * (16 * 3 - 2) ** 2
    assert kinds[OpKind.ALL_REDUCE].count == 5  # inside the 5-iteration loop
    assert kinds[OpKind.ALL_GATHER].bytes == 32 * 32 * 128 * 2  # the gathered result
    assert kinds[OpKind.REDUCE_SCATTER].bytes == 1024 * 4  # the input before scattering
    # loop: (add + negate) x 5 and compare x 5; slower branch (2 multiplies); the called sqrt
    assert kinds[OpKind.ELEMENTWISE].count == 10 + 5 + 2 + 1


def test_placement_of_groups(h100):
    two_nodes = load_system("dgx-h100", 16)
    assert placement_of((0, 1, 2, 3), two_nodes.sizes).spans == (4.0, 1.0)
    assert placement_of((0, 8), two_nodes.sizes).spans == (1.0, 2.0)
    assert placement_of(tuple(range(16)), two_nodes.sizes).spans == (8.0, 2.0)


def test_async_collective_overlaps_compute(forms, h100):
    result = simulate_hlo(forms, h100, replicas=8)
    tl, tasks = result.timeline, result.graph.tasks
    start = next(i for i, t in enumerate(tasks) if t.name == "ags")
    conv = next(i for i, t in enumerate(tasks) if t.name == "conv" and t.ranks == (0,))
    assert tl.start_ns[conv] < tl.end_ns[start]  # the convolution runs while the gather is in flight
    assert result.step_time_s < result.cost.serial_seconds


def test_simulation_sums_when_serial(h100):
    """A synchronous chain: the step is the sum of its kernels and collectives."""
    result = simulate_hlo(DATA / "gpt_small_dp.hlo.txt", h100)
    assert result.step_time_s == pytest.approx(result.compute_s + result.communication_s, rel=1e-3)
    assert result.compute_s > 0 and result.communication_s > 0


@pytest.mark.parametrize("strategy", ["tp", "dp", "fsdp"])
def test_jax_gpt_matmul_flops(strategy, h100):
    """The compiled step's dot FLOPs per device: 3 x forward (forward, input and weight gradients) of
    the layers' GEMMs and attention, and of the tied LM head (Narayanan et al. SC'21 eq. 3 without
    recomputation), split over the 8 devices."""
    cfg = json.loads((DATA / "gpt_small.json").read_text())["config"]
    b, s, h, f, v, L = cfg["batch"], cfg["seq"], cfg["hidden"], cfg["ffn"], cfg["vocab"], cfg["layers"]
    layer = 2 * b * s * (3 * h * h + h * h + 2 * h * f) + 2 * 2 * b * s * s * h
    expected = 3 * (L * layer + 2 * b * s * h * v) / 8
    cost = cost_module(read_hlo(DATA / f"gpt_small_{strategy}.hlo.txt"), h100)
    assert cost.by_kind[OpKind.DOT].flop == pytest.approx(expected, rel=0.02)


def test_bad_input():
    with pytest.raises(SpecError, match="no HLO computations"):
        parse_hlo("nothing here")
    with pytest.raises(SpecError, match="not closed"):
        parse_hlo("ENTRY %m {\n  %p = f32[] parameter(0)\n")
    with pytest.raises(SpecError, match="cannot read"):
        read_hlo(DATA / "missing.txt")


def test_cli_hlo(tmp_path):
    from typer.testing import CliRunner

    from armillary.cli import app

    out = CliRunner().invoke(app, ["simulate", "--hlo", str(DATA / "forms.hlo.txt"), "--system", "dgx-h100",
                                   "--replicas", "8", "--json", "--chakra", str(tmp_path / "et"),
                                   "--trace", str(tmp_path / "t.json")])
    assert out.exit_code == 0, out.output
    record = json.loads(out.output)
    assert record["simulated_ranks"] == 8 and record["partitions"] == 8
    assert {k["kind"] for k in record["kinds"]} >= {"dot", "convolution", "all-gather", "collective-permute"}
    assert len(list((tmp_path / "et").glob("*.et"))) == 8 and (tmp_path / "t.json").stat().st_size > 0
    missing = CliRunner().invoke(app, ["simulate", "--hlo", str(DATA / "forms.hlo.txt")])
    assert missing.exit_code != 0 and "--system" in missing.output


def test_tp_program_matches_the_analytical_profile(h100):
    """The H100-sized GPT step compiled by JAX with Megatron-style TP over 8 devices (fp32) against the
    estimator for the same model and strategy: same GEMM FLOPs, and the same all-reduces (2 per layer
    forward and 2 backward, plus the vocabulary-parallel embedding and LM head) with the same bytes; the
    HLO also has two small all-reduces (max and sum of the vocabulary-parallel softmax) the estimator omits."""
    from armillary import api

    cfg = json.loads((DATA / "gpt_large.json").read_text())["config"]
    model = {"name": "jax-gpt", "layers": cfg["layers"], "hidden": cfg["hidden"], "heads": cfg["heads"],
             "ffn": cfg["ffn"], "mlp": "gelu", "norm": "layernorm", "position": "learned", "vocab": cfg["vocab"],
             "tied_embeddings": True, "linear_bias": True, "dropout": False, "max_seq_len": cfg["seq"]}
    est = api.estimate(model, h100, {"tp": 8, "attention": "standard", "precision": "fp32",
                                     "micro_batch": cfg["batch"]},
                       {"kind": "training", "seq_len": cfg["seq"], "global_batch": cfg["batch"]})
    cost = cost_module(read_hlo(DATA / "gpt_large_tp.hlo.txt"), h100)
    assert cost.by_kind[OpKind.DOT].flop == pytest.approx(float(est.hardware_flop) / 8, rel=1e-6)
    calls = [c for c in est.communication if float(c.per_step) > 0 and float(c.message_bytes) > 0]
    assert {c.operation.value for c in calls} == {"all_reduce"}
    expected = sorted(float(c.message_bytes) for c in calls for _ in range(round(float(c.per_step))))
    runs = {cost.module.entry: 1}  # executions of each computation: the loops' bodies run their trip counts
    for (comp, loop), n in cost.trips.items():
        for callee in called(cost.module.computations[comp].by_name[loop]):
            runs[callee] = runs.get(comp, 1) * n
    found = [r.bytes for name, rows in cost.costs.items() for r in rows if r is not None and r.collective
             for _ in range(runs.get(name, 1))]
    large = sorted(b for b in found if b > 1e6)
    assert len(large) == len(expected)
    assert large == pytest.approx(expected, rel=1e-3)  # the embedding's all-reduce carries 64 KB more
    assert sorted(b for b in found if b <= 1e6) == [65536.0, 65536.0]
