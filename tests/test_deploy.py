"""Deployment export: Megatron-LM arguments of the shipped training examples, vLLM / TensorRT-LLM flags of the
serving example, and `search --emit` run files that estimate to the searched numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from armillary.cli import app
from armillary.errors import SpecError
from armillary.report.deploy import Command, Target, deployment
from armillary.specs.run import load_run

EXAMPLES = Path(__file__).parent.parent / "examples"
runner = CliRunner()


def _args(name: str, target: Target) -> tuple[list[str], tuple[str, ...]]:
    d = deployment(target, *load_run(EXAMPLES / name))
    return list(d.commands[0].argv), d.notes


def _value(argv: list[str], flag: str) -> str:
    assert argv.count(flag) == 1, f"{flag} in {argv}"
    return argv[argv.index(flag) + 1]


def test_llama3_70b_megatron():
    # tp 8, pp 4, vpp 5 of 80 layers: 80 / (4 x 5) = 4 layers per virtual stage; 512 / 32 = dp 16
    a, notes = _args("llama3-70b-h100.yaml", Target.MEGATRON)
    assert (_value(a, "--tensor-model-parallel-size"), _value(a, "--pipeline-model-parallel-size")) == ("8", "4")
    assert _value(a, "--num-layers-per-virtual-pipeline-stage") == "4"
    assert (_value(a, "--micro-batch-size"), _value(a, "--global-batch-size")) == ("1", "128")
    assert _value(a, "--num-query-groups") == "8" and _value(a, "--seq-length") == "8192"
    assert {"--sequence-parallel", "--use-distributed-optimizer", "--overlap-grad-reduce", "--overlap-param-gather",
            "--tp-comm-overlap", "--bf16"} <= set(a)
    assert _value(a, "--attention-backend") == "fused"  # flash3 = cuDNN fused attention
    assert "--recompute-granularity" not in a and "--context-parallel-size" not in a
    assert any("data parallel 16" in n for n in notes)


def test_mixtral_megatron_experts_and_recompute():
    a, _ = _args("mixtral-8x7b-h100.yaml", Target.MEGATRON)
    assert _value(a, "--expert-model-parallel-size") == "8" and _value(a, "--expert-tensor-parallel-size") == "1"
    assert (_value(a, "--num-experts"), _value(a, "--moe-router-topk")) == ("8", "2")
    assert _value(a, "--recompute-granularity") == "selective" and "--recompute-modules" not in a


def test_fsdp_fp8_full_recompute_cp_and_uneven_stages():
    model, system, strategy, workload = load_run(EXAMPLES / "llama3-70b-h100.yaml")
    s = type(strategy).model_validate({**strategy.model_dump(), "zero": 3, "precision": "fp8", "recompute": "full",
                                       "cp": 2, "vpp": 1, "first_stage_layers": 17})
    a = list(deployment(Target.MEGATRON, model, system, s, workload).commands[0].argv)
    assert "--num-layers-per-virtual-pipeline-stage" not in a
    assert "--use-torch-fsdp2" in a and "--use-distributed-optimizer" not in a
    assert _value(a, "--fp8-format") == "hybrid" and "--bf16" in a
    assert (_value(a, "--recompute-granularity"), _value(a, "--recompute-method")) == ("full", "uniform")
    assert (_value(a, "--context-parallel-size"), _value(a, "--cp-comm-type")) == ("2", "p2p")
    assert _value(a, "--decoder-first-pipeline-num-layers") == "17"
    s = type(strategy).model_validate({**strategy.model_dump(), "recompute": "full", "recompute_layers": 2})
    a = list(deployment(Target.MEGATRON, model, system, s, workload).commands[0].argv)
    assert (_value(a, "--recompute-method"), _value(a, "--recompute-num-layers")) == ("block", "2")
    s = type(strategy).model_validate({**strategy.model_dump(), "offload": {"activations": True,
                                                                           "activation_layers": 3}})
    d = deployment(Target.MEGATRON, model, system, s, workload)
    a = list(d.commands[0].argv)
    assert "--cpu-offloading" in a and _value(a, "--cpu-offloading-num-layers") == "3"
    s = type(strategy).model_validate({**strategy.model_dump(), "offload": {"activations": True}})
    d = deployment(Target.MEGATRON, model, system, s, workload)
    assert "--cpu-offloading" not in d.commands[0].argv and any("activation_layers" in n for n in d.notes)
    s = type(strategy).model_validate({**strategy.model_dump(), "vpp": 3})  # 80 layers do not split in 4 x 3
    a = list(deployment(Target.MEGATRON, model, system, s, workload).commands[0].argv)
    assert _value(a, "--num-virtual-stages-per-pipeline-rank") == "3"


def test_vllm_and_trtllm_serving_example():
    # tp 4 on 8 devices: 2 replicas; fp8 weights and KV cache; 64-token pages; 2048 + 256 tokens
    a, _ = _args("llama2-70b-serving-h100.yaml", Target.VLLM)
    assert a[:2] == ["vllm", "serve"]
    assert (_value(a, "--tensor-parallel-size"), _value(a, "--data-parallel-size")) == ("4", "2")
    assert (_value(a, "--kv-cache-dtype"), _value(a, "--quantization")) == ("fp8", "fp8")
    assert (_value(a, "--max-model-len"), _value(a, "--block-size")) == ("2304", "64")
    assert (_value(a, "--max-num-seqs"), _value(a, "--max-num-batched-tokens")) == ("256", "8192")
    assert "--enable-chunked-prefill" in a
    d = deployment(Target.TRTLLM, *load_run(EXAMPLES / "llama2-70b-serving-h100.yaml"))
    serve, build = (list(c.argv) for c in d.commands)
    assert serve[:2] == ["trtllm-serve", "serve"] and _value(serve, "--tp_size") == "4"
    assert (_value(serve, "--max_batch_size"), _value(serve, "--max_seq_len")) == ("256", "2304")
    assert build[0] == "trtllm-build" and _value(build, "--max_input_len") == "2048"
    options = yaml.safe_load(dict(d.files)["extra_llm_api_options.yaml"])
    assert options["kv_cache_config"] == {"tokens_per_block": 64, "enable_block_reuse": False, "dtype": "fp8"}


def test_wrong_kind_is_an_error():
    with pytest.raises(SpecError, match="training workload"):
        deployment(Target.MEGATRON, *load_run(EXAMPLES / "llama2-70b-serving-h100.yaml"))
    with pytest.raises(SpecError, match="inference workload"):
        deployment(Target.VLLM, *load_run(EXAMPLES / "llama3-70b-h100.yaml"))


def test_shell_text_round_trips():
    import shlex

    c = Command(("vllm", "serve", "Llama 2 70B", "--tensor-parallel-size", "4", "--enable-chunked-prefill"))
    assert shlex.split(c.shell().replace("\\\n", " ")) == list(c.argv)


def test_cli_emit_and_search_emit(tmp_path):
    out = runner.invoke(app, ["estimate", str(EXAMPLES / "llama3-70b-h100.yaml"), "--emit", "megatron"])
    assert out.exit_code == 0 and out.output.count("--tensor-model-parallel-size 8") == 1
    bad = runner.invoke(app, ["estimate", str(EXAMPLES / "llama3-70b-h100.yaml"), "--emit", "deepspeed"])
    assert bad.exit_code == 2 and "megatron, vllm, trtllm" in bad.output
    best = tmp_path / "best.yaml"
    out = runner.invoke(app, ["search", "--model", "llama3-8b", "--system", "dgx-h100", "--gpus", "16",
                              "--global-batch", "64", "--json", "--emit", str(best)])
    assert out.exit_code == 0, out.output
    # the output mixes the JSON with the stderr line "wrote ...", before or after it as the streams flush
    top = json.JSONDecoder().raw_decode(out.output[out.output.index("{"):])[0]["top"][0]
    again = runner.invoke(app, ["estimate", str(best), "--json"])
    assert json.loads(again.output)["step_time_s"] == pytest.approx(top["step_time_s"], rel=1e-9)


def test_offloads_and_a_memory_pool_megatron_cannot_run_are_noted():
    """Gradient and expert offload and a memory pool have no Megatron-LM argument: the launch says so instead of
    silently dropping them (the optimizer offload keeps its flag)."""
    from armillary.specs.loading import load_model, load_system
    from armillary.specs.strategy import Strategy
    from armillary.specs.workload import Training

    strategy = Strategy(tp=8, zero=1, offload={"optimizer": True, "gradients": True, "experts": True})
    d = deployment(Target.MEGATRON, load_model("mixtral-8x7b"), load_system("dgx-h100-cxl-pool", 16), strategy,
                   Training(seq_len=4096, global_batch=16))
    notes = " ".join(d.notes)
    assert "--optimizer-cpu-offload" in d.commands[0].argv
    assert "gradient offload" in notes and "expert offload" in notes and "memory pool" in notes
