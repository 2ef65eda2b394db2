"""LoRA / QLoRA fine-tuning (Hu et al. 2021, arXiv:2106.09685; Dettmers et al. 2023, arXiv:2305.14314):
FLOPs and memory by hand on a small GPT, the MLPerf Llama 2 70B LoRA rows, and LoRA never slower than
training every weight of the same configuration."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from conftest import gpt
from hypothesis import given
from hypothesis import strategies as hs
from pydantic import ValidationError

from armillary import Strategy, Training, estimate
from armillary.estimate.flops import model_flop_per_iteration
from armillary.plan.arrays import ModelArrays, TrainingArrays
from armillary.specs.workload import BasePrecision, Lora
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import run_row

R = 16
LORA = Lora(rank=R)  # q, k, v, o on the fused QKV projection; bf16 base
DATA = Path(__file__).parent.parent / "src/armillary/validation/data/measurements.csv"


def _tiny() -> tuple[int, int, int, int]:
    return 4, 256, 4, 1024  # layers, hidden, heads, vocab


def test_forward_is_base_plus_adapters_and_backward_has_no_base_weight_gradient():
    """A GPT layer (MHA, GeLU MLP), standard attention, one device, micro-batch b: the fused QKV adapter
    reads h and writes 3h, the output projection's reads h and writes h: 2 r (d_in + d_out) = 2 r (2h + 4h)
    FLOPs per token (Hu et al. §4.1). Backward: every GEMM's input gradient (24 b s h^2 + 2 x 4 b s^2 h) and
    the adapters' input gradient; weight gradients only the adapters' (as many FLOPs as their forward)."""
    layers, h, heads, vocab = _tiny()
    model = gpt(layers, h, heads, vocab)
    b, s = 2, 128
    r = estimate(model, "dgx-a100", Strategy(micro_batch=b, attention="standard"),
                 Training(seq_len=s, global_batch=b, finetune=LORA), gpus=1)
    adapters = 2 * R * (2 * h + 4 * h) * b * s
    lc = r.layer
    assert float(lc.forward.flop) == pytest.approx(24 * b * s * h**2 + 4 * b * s * s * h + adapters, rel=1e-12)
    assert float(lc.backward_input.flop) == pytest.approx(24 * b * s * h**2 + 8 * b * s * s * h + adapters, rel=1e-12)
    assert float(lc.backward_weight.flop) == pytest.approx(adapters, rel=1e-12)
    full = estimate(model, "dgx-a100", Strategy(micro_batch=b, attention="standard"),
                    Training(seq_len=s, global_batch=b), gpus=1)
    assert float(full.layer.backward_weight.flop) == pytest.approx(24 * b * s * h**2, rel=1e-12)


def test_model_flops_of_a_lora_iteration_by_hand():
    """Whole iteration: L (fw 24Bsh^2 + 4Bs^2h + A, bw 24Bsh^2 + 8Bs^2h + 2A) + the frozen LM head's forward
    and input gradient 2 x 2BshV, with A = 2 r 6h B s."""
    layers, h, heads, vocab = _tiny()
    B, s = 8, 128
    m = ModelArrays.of(gpt(layers, h, heads, vocab))
    got = model_flop_per_iteration(m, TrainingArrays.of(Training(seq_len=s, global_batch=B, finetune=LORA)))
    A = 2 * R * 6 * h * B * s
    expected = layers * (48 * B * s * h**2 + 12 * B * s * s * h + 3 * A) + 2 * 2 * B * s * h * vocab
    assert float(got.total) == pytest.approx(expected, rel=1e-12)
    assert float(got.layers_forward) == pytest.approx(layers * (24 * B * s * h**2 + 4 * B * s * s * h + A), rel=1e-12)


def test_separate_adapters_read_the_input_once_each():
    """PEFT's one adapter per projection: q, k, v each read h (3h in), write h each (MHA)."""
    layers, h, heads, vocab = _tiny()
    m = ModelArrays.of(gpt(layers, h, heads, vocab))
    from armillary.workload.adapters import adapter_parameters, adapter_widths

    fused = TrainingArrays.of(Training(seq_len=8, global_batch=1, finetune=LORA))
    separate = TrainingArrays.of(Training(seq_len=8, global_batch=1, finetune=Lora(rank=R, fused=False)))
    assert tuple(float(x) for x in adapter_widths(m, fused)) == (2 * h, 4 * h)
    assert tuple(float(x) for x in adapter_widths(m, separate)) == (4 * h, 4 * h)
    mlp = TrainingArrays.of(Training(seq_len=8, global_batch=1, finetune=Lora(rank=R, target_modules=("up", "down"))))
    assert float(adapter_parameters(m, mlp)) == R * (h + 4 * h + 4 * h + h)


@pytest.mark.parametrize("zero", [0, 1, 3])
def test_no_gradients_or_optimizer_states_for_the_base(zero):
    """bf16 recipe (Megatron table: 2 + 4 + 12 bytes per trained parameter): the base keeps its 2-byte
    weights only; the adapters, r (2h + 4h) per layer over tp, carry gradients and optimizer states, sharded
    by ZeRO over dp."""
    model = gpt(8, 1024, 16)
    t, dp = 2, 4
    st = Strategy(tp=t, zero=zero, precision="bf16")
    full = estimate(model, "dgx-a100", st, Training(seq_len=512, global_batch=8), gpus=t * dp)
    lora = estimate(model, "dgx-a100", st, Training(seq_len=512, global_batch=8, finetune=LORA), gpus=t * dp)
    adapters = 8 * R * 6 * 1024 / t
    shards = {z: dp if zero >= z else 1 for z in (1, 2, 3)}
    assert float(lora.memory_hbm.optimizer_states) == pytest.approx(12 * adapters / shards[1], rel=1e-12)
    assert float(lora.memory_hbm.gradients) == pytest.approx(4 * adapters / shards[2], rel=1e-12)
    assert float(lora.memory_hbm.weights) == pytest.approx(float(full.memory_hbm.weights) + 2 * adapters / shards[3],
                                                           rel=1e-12)
    assert float(lora.memory_hbm.total) < float(full.memory_hbm.total)


def test_frozen_gemms_keep_no_inputs():
    """Adapters on the attention only: the MLP's frozen GEMMs keep no input (Transformer Engine saves it only
    for the weight gradient), so activations shrink by the MLP input (h) and the down projection's input (4h)
    per token at 2 bytes."""
    model = gpt(8, 1024, 16)
    b, s = 1, 512
    st = Strategy(precision="bf16", attention="flash")
    full = estimate(model, "dgx-a100", st, Training(seq_len=s, global_batch=1), gpus=1)
    lora = estimate(model, "dgx-a100", st, Training(seq_len=s, global_batch=1, finetune=LORA), gpus=1)
    saved = 8 * 2 * b * s * (1024 + 4 * 1024)
    assert float(full.memory_hbm.activations - lora.memory_hbm.activations) == pytest.approx(saved, rel=1e-9)


def test_qlora_stores_the_base_in_4_bits_and_dequantizes_it():
    """NF4 with double-quantized scales: 4.127 bits per weight (Dettmers et al. §3); the dequantization is a
    stream over the layer's weights each forward and input gradient."""
    model = gpt(8, 1024, 16)
    w = {"seq_len": 512, "global_batch": 1}
    st = Strategy(precision="bf16")
    bf16 = estimate(model, "dgx-a100", st, Training(**w, finetune=LORA), gpus=1)
    nf4 = estimate(model, "dgx-a100", st, Training(**w, finetune=Lora(rank=R, base_precision="nf4")), gpus=1)
    adapters = 8 * R * 6 * 1024
    assert BasePrecision.NF4.bytes == pytest.approx(4.127 / 8, abs=1e-3)
    base = (float(bf16.memory_hbm.weights) - 2 * adapters) / 2
    # bitsandbytes quantizes the linear layers: the embedding stays 16-bit (Lightning's BitsandbytesPrecision
    # replaces nn.Linear only)
    from armillary.plan.arrays import ModelArrays
    from armillary.workload.parameters import count_parameters

    embedding = float(count_parameters(ModelArrays.of(model)).embedding)
    assert float(nf4.memory_hbm.weights) == pytest.approx(
        (base - embedding) * BasePrecision.NF4.bytes + 2 * embedding + 2 * adapters, rel=1e-9)
    assert float(nf4.layer.forward.time_s) > float(bf16.layer.forward.time_s)


def test_lora_spec_errors_name_the_field():
    with pytest.raises(ValidationError, match="target_modules"):
        Lora(rank=16, target_modules=("qkv",))
    with pytest.raises(ValidationError, match="base_precision"):
        Lora(rank=16, base_precision="int4")
    with pytest.raises(ValidationError, match="rank"):
        Lora(rank=0)


def _lora_rows() -> list[dict[str, str]]:
    with DATA.open() as f:
        return [r for r in csv.DictReader(f) if r["id"].endswith("-LORA-THR")]


def test_the_mlperf_lora_rows_are_feasible_and_within_15_percent():
    rows = _lora_rows()
    assert len(rows) == 4
    results = [run_row(r) for r in rows]
    assert all(r.feasible and r.skipped is None for r in results), [r.skipped for r in results]
    assert all(any("LoRA rank 16" in a for a in r.assumptions) for r in results)
    mean = sum(abs(r.error) for r in results if r.error is not None) / len(results)
    assert mean < 0.15


def test_a_lora_row_without_its_rank_is_refused_naming_the_column():
    row = dict(_lora_rows()[0])
    row["model"], row["notes"] = "Llama 2 70B LoRA fine-tuning", ""
    with pytest.raises(Unsupported, match="model: a LoRA row must state one adapter rank"):
        row_specs(row)


_CONFIGS = hs.fixed_dictionaries({
    "tp": hs.sampled_from([1, 2, 4]), "pp": hs.sampled_from([1, 2]), "micro_batch": hs.sampled_from([1, 2]),
    "recompute": hs.sampled_from(["none", "selective", "full"]), "zero": hs.sampled_from([0, 1, 3]),
    "precision": hs.sampled_from(["bf16", "fp8"]), "attention": hs.sampled_from(["standard", "flash"]),
    "schedule": hs.sampled_from(["1f1b", "zb-h1"]), "sequence_parallel": hs.booleans(),
})


@given(config=_CONFIGS, targets=hs.sampled_from([("q", "k", "v", "o"), ("q", "v"), ("q", "k", "v", "o", "up", "down")]),
       base=hs.sampled_from(["bf16", "fp8"]), fused=hs.booleans())
def test_lora_is_never_slower_than_training_every_weight(config, targets, base, fused):
    """Same model, system and strategy: the frozen base drops its weight-gradient GEMMs, gradient reduction
    and optimizer step; rank-16 adapters add far less."""
    sp = config["sequence_parallel"] and config["tp"] > 1
    st = Strategy(**{**config, "sequence_parallel": sp})
    model = gpt(8, 1024, 16)
    w = {"seq_len": 1024, "global_batch": 16}
    full = estimate(model, "dgx-h100", st, Training(**w), gpus=8)
    lora = estimate(model, "dgx-h100", st, Training(**w, finetune=Lora(rank=R, target_modules=targets,
                                                                         base_precision=base, fused=fused)), gpus=8)
    assert float(lora.step_time_s) <= float(full.step_time_s) * (1 + 1e-12)
    assert float(lora.memory_hbm.total) <= float(full.memory_hbm.total) * (1 + 1e-12)


def test_search_carries_the_lora_workload():
    from armillary import api

    model = gpt(8, 1024, 16)
    w = Training(seq_len=1024, global_batch=16, finetune=LORA)
    result = api.search(model, "dgx-h100", w, gpus=8, space={"tp": [1, 2], "pp": [1], "micro_batch": [1, 2]}, top=2)
    best = result.top[0]
    again = estimate(model, "dgx-h100", best.strategy, w, gpus=8)
    assert float(again.step_time_s) == pytest.approx(best.step_time_s, rel=1e-9)


def test_megatron_emit_says_it_cannot_express_lora():
    from armillary.report.deploy import Target, deployment
    from armillary.specs.loading import load_model, load_system

    model, system = load_model("llama2-70b"), load_system("dgx-h100", 8)
    text = deployment(Target.MEGATRON, model, system, Strategy(tp=4),
                      Training(seq_len=8192, global_batch=8, finetune=LORA)).text()
    assert "pretrain_gpt.py has no LoRA flag" in text and "linear_qkv" in text and "linear_proj" in text


def test_the_simulator_overlaps_tp_with_the_frozen_forward_gemms():
    """The simulated LoRA iteration agrees with the analytical one: TP collectives overlap the forward's
    (frozen) weight GEMMs, not the adapters' small weight gradients."""
    from armillary import api
    from armillary.cli.common import load_run_file

    model, system, strategy, workload = load_run_file(Path(__file__).parent.parent
                                                      / "examples/llama2-70b-lora-h100.yaml")
    sim = api.simulate(model, system, strategy, workload)
    assert abs(sim.difference) < 0.01


def test_the_cli_says_it_is_lora_and_search_takes_the_lora_options(tmp_path):
    from typer.testing import CliRunner

    from armillary.cli import app

    run = CliRunner()
    example = str(Path(__file__).parent.parent / "examples/llama2-70b-lora-h100.yaml")
    out = run.invoke(app, ["estimate", example], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "fine-tuning: LoRA rank 16 on q, k, v, o" in out.output
    emitted = tmp_path / "best.yaml"
    out = run.invoke(app, ["search", "--model", "llama2-70b", "--system", "dgx-h100", "--gpus", "8",
                           "--global-batch", "8", "--seq-len", "8192", "--lora-rank", "16", "--lora-base", "fp8",
                           "--top", "1", "--emit", str(emitted)], env={"COLUMNS": "200"})
    assert out.exit_code == 0, out.output
    assert "finetune:" in emitted.read_text() and "rank: 16" in emitted.read_text()
    out = run.invoke(app, ["search", "--model", "llama2-70b", "--system", "dgx-h100", "--gpus", "8",
                           "--global-batch", "8", "--lora-rank", "16", "--lora-targets", "q,x"])
    assert out.exit_code != 0 and "workload.finetune.target_modules" in out.output
