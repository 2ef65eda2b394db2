"""`--emit megatron` builds the model the estimate priced: each architectural departure from Megatron-Core's
defaults (GeLU, LayerNorm, learned positions, biases, tied embeddings, dropout 0.1) is a flag of
megatron/training/arguments.py or TransformerConfig, or a note saying what the arguments cannot express."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from armillary.cli import app
from armillary.report.deploy import Target, deployment
from armillary.specs.loading import load_model
from armillary.specs.run import load_run

EXAMPLES = Path(__file__).parent.parent / "examples"


def _emit(model_name: str) -> tuple[list[str], tuple[str, ...]]:
    _, system, strategy, workload = load_run(EXAMPLES / "llama3-70b-h100.yaml")
    d = deployment(Target.MEGATRON, load_model(model_name), system, strategy, workload)
    return list(d.commands[0].argv), d.notes


def _value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} in {argv}"
    return argv[argv.index(flag) + 1]


def test_llama_keeps_swiglu_rmsnorm_rope_untied_no_bias_no_dropout() -> None:
    a, notes = _emit("llama3.1-70b")
    assert {"--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear"} <= set(a)
    assert _value(a, "--normalization") == "RMSNorm" and _value(a, "--position-embedding-type") == "rope"
    assert _value(a, "--hidden-dropout") == "0" and _value(a, "--attention-dropout") == "0"
    assert _value(a, "--num-query-groups") == "8" and "--group-query-attention" in a
    assert "--kv-channels" not in a  # 8192 / 64 = 128, Megatron's own default
    assert any("vocabulary 128,256" in n for n in notes)


def test_gpt3_is_megatron_defaults_but_dropout() -> None:
    a, _ = _emit("gpt3-175b")  # GeLU, LayerNorm, learned positions, biases, tied embeddings
    assert not {"--swiglu", "--normalization", "--position-embedding-type", "--untie-embeddings-and-output-weights",
                "--disable-bias-linear"} & set(a)


def test_deepseek_v3_latent_attention_shared_expert_and_dense_layers() -> None:
    a, _ = _emit("deepseek-v3")
    assert "--multi-latent-attention" in a
    assert (_value(a, "--kv-lora-rank"), _value(a, "--q-lora-rank")) == ("512", "1536")
    assert (_value(a, "--qk-head-dim"), _value(a, "--qk-pos-emb-head-dim"), _value(a, "--v-head-dim")) == (
        "128", "64", "128")
    assert _value(a, "--moe-ffn-hidden-size") == "2048" and _value(a, "--moe-shared-expert-intermediate-size") == "2048"
    assert _value(a, "--moe-layer-freq") == "([0]*3+[1]*58)"  # 3 dense layers of 61


def test_gpt_oss_window_sinks_and_qwen3_qk_norm() -> None:
    a, notes = _emit("gpt-oss-20b")
    assert _value(a, "--window-size") == "128,0" and _value(a, "--window-attn-skip-freq") == "2"
    assert _value(a, "--softmax-type") == "learnable" and _value(a, "--kv-channels") == "64"
    assert any("router bias" in n for n in notes)
    q, _ = _emit("qwen3-30b-a3b")
    assert "--qk-layernorm" in q


def test_what_megatron_cannot_express_is_a_note() -> None:
    _, notes = _emit("bloom-176b")
    assert any(n.startswith("ALiBi positions") for n in notes)
    _, notes = _emit("matmulfree-2.7b")
    assert any("MatMul-free" in n for n in notes)


def test_command_line_emits_them() -> None:
    out = CliRunner().invoke(app, ["estimate", str(EXAMPLES / "llama3-70b-h100.yaml"), "--emit", "megatron"])
    assert out.exit_code == 0, out.output
    assert "--swiglu" in out.output and "--normalization RMSNorm" in out.output
