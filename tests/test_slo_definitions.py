"""`search --tpot-limit` and `serve --max-rate` answer the same question by different runs (issue 45: 113 vs
185 tok/s/GPU with nothing reconciling them): each output states how it judged the SLOs and points at the
other, and on the shipped serving example the static batch is the conservative one, as both say."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

import armillary
from armillary.cli import app
from armillary.search.inference import JUDGED as STATIC
from armillary.serving.rate import JUDGED as SERVED

EXAMPLE = Path(__file__).parent.parent / "examples" / "llama2-70b-serving-h100.yaml"
SEARCH = ["search", "--model", "llama2-70b", "--system", "dgx-h100", "--gpus", "8", "--tpot-limit", "0.05",
          "--ttft-limit", "2"]


def _search(tmp_path: Path, *extra: str) -> CliRunner:
    (tmp_path / "base.yaml").write_text("tp: 4\nprecision: fp8\nattention: flash3\n")
    (tmp_path / "axes.yaml").write_text("tp: [4]\nweights: [fp8]\nkv_cache: [fp8]\n")
    return CliRunner().invoke(app, [*SEARCH, "--strategy", str(tmp_path / "base.yaml"), "--strategies",
                                    str(tmp_path / "axes.yaml"), "--top", "1", *extra])


def test_each_output_states_its_definition_and_names_the_other(tmp_path: Path) -> None:
    assert "static batch" in STATIC and "serve RUN --max-rate" in STATIC and "P99 TPOT" in STATIC
    assert "Poisson stream" in SERVED and "search --tpot-limit" in SERVED and "static batch" in SERVED
    text = _search(tmp_path)
    assert text.exit_code == 0, text.output
    assert "limits judged on one static batch" in " ".join(text.output.split())
    record = json.loads(_search(tmp_path, "--json").stdout)
    assert record["judged"] == STATIC


def test_the_static_batch_is_the_conservative_answer_on_the_example(tmp_path: Path) -> None:
    record = json.loads(_search(tmp_path, "--json").stdout)
    static = record["top"][0]["output_tokens_per_s_per_device"]
    model, system, strategy, workload = armillary.load_run(EXAMPLE)
    served = armillary.max_rate(model, system, strategy, workload, duration_s=30, seeds=1)
    assert served.result is not None
    # 232 (batch 16: its prompts prefilled together take 1.6 s of the 2 s TTFT) vs about 260 at ~10 req/s
    assert static < served.result.output_tokens_per_s_per_device
    assert served.result.output_tokens_per_s_per_device < 1.5 * static
    out = CliRunner().invoke(app, ["serve", str(EXAMPLE), "--max-rate", "--seeds", "1", "--duration", "30",
                                   "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.stdout)["judged"] == SERVED
