"""An engine's defaults that depend on its release, the model and the launch (`serving.launch.resolve_defaults`):
one function for `armillary serve` / the API (`with_engine`) and the validation harness
(`serving_launch.engine_of_row`), one test per rule, and the same engine for the same run read either way."""

import pytest

from armillary import api
from armillary.plan.arrays import ModelArrays
from armillary.serving import run as serving_run
from armillary.serving.engine import Engine, load_engine, on_device
from armillary.serving.engine_releases import ReleaseDefaults
from armillary.serving.engine_versions import stated_releases
from armillary.serving.launch import resolve_defaults, with_engine
from armillary.specs.loading import load_model, load_system
from armillary.specs.workload import Inference, MlaDecode
from armillary.validation.serving_launch import engine_of_row
from armillary.validation.vocabulary import framework_words

V0 = load_engine("vllm-0.6")


def _row(framework: str) -> dict[str, str]:
    return {"framework": framework_words(framework), "other_reported": "", "notes": "", "tp": "1"}


def _workload(engine: str, **serving: object) -> Inference:
    return Inference.model_validate({"input_len": 512, "output_len": 64, "serving": {"engine": engine, **serving}})


# --- the same run read by the harness and by serve / the API ---

@pytest.mark.parametrize(("version", "chunked"), [
    ("0.6.3", 512), ("0.7.0", 2048),  # no MLA rule before 0.7.1: on above 32K, as for any model
    ("0.7.3", None), ("0.7.4.dev181+gf35f8e22", None),  # MLA: off, though its 163,840-token context is over 32K
])
def test_serve_and_the_harness_launch_vllm_v0_alike_for_an_mla_model(version: str, chunked: int | None) -> None:
    model, device = load_model("deepseek-v2-lite"), load_system("dgx-h100", 1).device
    harness = engine_of_row(_row(f"vLLM {version}: vllm serve"), True, [], model.max_seq_len, device)
    w, served = with_engine(_workload(f"vllm=={version}"), None, device, ModelArrays.of(model))
    assert served == harness
    expanded = version in ("0.6.3", "0.7.0")  # per-head K/V before PR #12528 (v0.7.1)
    assert harness.mla_decode is (MlaDecode.EXPANDED if expanded else MlaDecode.MATERIALIZED)
    assert harness.chunked_prefill is (chunked is not None)
    assert harness.max_batched_tokens == (chunked or model.max_seq_len)  # unchunked: max(max_model_len, 2048)
    sv = w.serving
    assert (sv.chunked_prefill, sv.max_batched_tokens, w.mla_decode) == (
        harness.chunked_prefill, harness.max_batched_tokens, harness.mla_decode)


def test_the_api_serves_with_the_engine_as_the_harness_launches_it(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[Engine | None] = []

    def recording(*args: object, **kwargs: object) -> tuple[Inference, Engine | None]:
        out = with_engine(*args, **kwargs)  # type: ignore[arg-type]
        seen.append(out[1])
        return out

    monkeypatch.setattr(serving_run, "with_engine", recording)
    model, device = load_model("deepseek-v2-lite"), load_system("dgx-h100", 1).device
    api.simulate_serving("deepseek-v2-lite", "dgx-h100", {"tp": 1},
                         {"kind": "inference", "input_len": 256, "output_len": 16,
                          "serving": {"engine": "vllm==0.6.3"}}, rate=2.0, duration_s=2.0, gpus=1)
    harness = engine_of_row(_row("vLLM 0.6.3: vllm serve"), True, [], model.max_seq_len, device)
    assert seen and seen[0] == harness


# --- one rule each ---

def test_vllm_v0_runs_an_mla_model_without_chunked_prefill_unless_launched_with_it() -> None:
    dev = "vLLM 0.7.4.dev181+gf35f8e22"  # main after PR #12639 (2025-02-21): off by default, the flag kept
    off, notes = resolve_defaults(V0, dev, mla=True, max_model_len=163840)
    assert not off.chunked_prefill and off.max_batched_tokens == 163840
    assert any("multi-head latent attention" in n for n in notes)
    on, _ = resolve_defaults(V0, dev, mla=True, max_model_len=163840, flags={"chunked_prefill": True})
    assert on.chunked_prefill and on.max_batched_tokens == 2048
    assert resolve_defaults(V0, dev, max_model_len=163840)[0].chunked_prefill  # not MLA: on above 32K
    assert not resolve_defaults(load_engine("vllm-0.8"), "vllm 0.9.1", mla=True)[0].mla_without_chunked_prefill
    assert resolve_defaults(load_engine("vllm-0.8"), "vllm 0.9.1", mla=True)[0].chunked_prefill  # V1: no such rule


@pytest.mark.parametrize("version", ["vLLM 0.7.1", "vllm==0.7.3", "vLLM 0.7.3.dev138+g21f6ca217"])
def test_vllm_0_7_1_to_0_7_3_force_mla_chunked_prefill_and_prefix_caching_off_over_the_flags(version: str) -> None:
    flags = "vllm serve --enable-chunked-prefill --enable-prefix-caching"  # PR #12642: the flags have no effect
    notes: list[str] = []
    e = engine_of_row(_row(f"{version}: {flags}"), True, notes, 163840)
    assert not e.chunked_prefill and not e.prefix_caching and e.max_batched_tokens == 163840
    assert any("forces them off" in n and "ignored" in n for n in notes)
    assert any("not modelled" in n and "2048" in n for n in notes)  # vLLM's leftover budget, said not modelled
    quiet: list[str] = []
    engine_of_row(_row(f"{version}: vllm serve --max-model-len 32768"), True, quiet)  # nothing asked chunked prefill
    assert not any("not modelled" in n for n in quiet)
    later = engine_of_row(_row(f"vLLM 0.7.4.dev181+gf35f8e22: {flags}"), True, [], 163840)  # after PR #12639
    assert later.chunked_prefill and later.prefix_caching and later.max_batched_tokens == 2048
    assert engine_of_row(_row(f"{version}: {flags}"), False, [], 163840).chunked_prefill  # not MLA: the flags hold


def test_vllm_v0_turns_chunked_prefill_on_above_32k_of_context() -> None:
    assert resolve_defaults(V0, "vllm 0.6.3", max_model_len=32769)[0].chunked_prefill
    assert not resolve_defaults(V0, "vllm 0.6.3", max_model_len=32768)[0].chunked_prefill
    assert not resolve_defaults(V0, "vllm 0.6.3", max_model_len=131072, flags={"chunked_prefill": False})[
        0].chunked_prefill
    assert not resolve_defaults(V0, "vllm 0.7.4.dev181", mla=True, max_model_len=131072)[0].chunked_prefill  # MLA
    assert resolve_defaults(V0, "vllm 0.6.3", mla=True, max_model_len=131072)[0].chunked_prefill  # no MLA rule yet
    assert not resolve_defaults(V0, "vllm 0.6.3")[0].chunked_prefill  # context unknown: the profile's


@pytest.mark.parametrize(("version", "budget"), [
    ("vLLM 0.6.3.post2.dev308+gb489fc3c", 512), ("vllm==0.6.0", 512),  # 0.6: PR #4580
    ("vLLM 0.7.0", 2048), ("vllm 0.7", 2048), ("vLLM 0.7.4.dev181", 2048), ("vllm-0.6", 2048),  # 0.7 (the profile)
])
def test_vllm_v0_token_budget_with_chunked_prefill_by_release(version: str, budget: int) -> None:
    e, _ = resolve_defaults(V0, version, max_model_len=131072)
    assert e.chunked_prefill and e.max_batched_tokens == budget
    flagged, _ = resolve_defaults(V0, version, max_model_len=131072, flags={"max_batched_tokens": 8192})
    assert flagged.max_batched_tokens == 8192  # the launch's budget wins


def test_vllm_v0_token_budget_without_chunked_prefill_fits_the_whole_context() -> None:
    assert resolve_defaults(V0, "vllm 0.6.3", max_model_len=4096)[0].max_batched_tokens == 4096
    assert resolve_defaults(V0, "vllm 0.6.3", max_model_len=1024)[0].max_batched_tokens == 2048  # the floor
    assert resolve_defaults(V0, "vllm 0.6.3")[0].max_batched_tokens == V0.max_batched_tokens  # context unknown


@pytest.mark.parametrize(("version", "mode"), [
    ("vLLM 0.6.6.post1", MlaDecode.EXPANDED), ("vllm==0.7.0", MlaDecode.EXPANDED), ("vllm 0.6", MlaDecode.EXPANDED),
    ("vLLM 0.7.1", MlaDecode.MATERIALIZED), ("vllm 0.7", MlaDecode.MATERIALIZED),  # 0.7 spans 0.7.0 and 0.7.1+
    ("vllm-0.6", MlaDecode.MATERIALIZED), ("", MlaDecode.MATERIALIZED),  # no version named: the profile's
])
def test_vllm_before_0_7_1_runs_mla_expanded(version: str, mode: MlaDecode) -> None:
    assert resolve_defaults(V0, version, mla=True)[0].mla_decode is mode


def test_sglang_data_parallel_attention_divides_the_token_budget() -> None:
    old, new = load_engine("sglang-0.4"), load_engine("sglang-0.5")
    assert resolve_defaults(old, "sglang 0.4.3", attention_dp=8)[0].max_batched_tokens == 4096  # halved
    assert resolve_defaults(old, "sglang 0.4.3", attention_dp=8,
                            flags={"max_batched_tokens": 16384})[0].max_batched_tokens == 8192  # the flag's too
    assert resolve_defaults(new, "sglang 0.5.2", attention_dp=8)[0].max_batched_tokens == 1024  # by dp_size
    assert resolve_defaults(old, "sglang 0.4.3")[0].max_batched_tokens == 8192  # no DP attention
    assert resolve_defaults(load_engine("vllm-0.8"), "vllm 0.9.1", attention_dp=8)[0].max_batched_tokens == 8192
    row = {**_row("SGLang 0.4.3.post2: launch_server --tp 8 --enable-dp-attention"), "tp": "8"}
    assert engine_of_row(row, True, []).max_batched_tokens == 4096


def test_what_the_workload_sets_wins_over_what_the_engine_derives() -> None:
    m = ModelArrays.of(load_model("deepseek-v2-lite"))
    w, _ = with_engine(_workload("vllm==0.6.3", chunked_prefill=True), None, None, m)
    assert w.serving.chunked_prefill and w.serving.max_batched_tokens == 512  # the budget that goes with it
    w, _ = with_engine(_workload("vllm==0.7.4.dev181", max_batched_tokens=4096), None, None, m)
    assert w.serving.max_batched_tokens == 4096 and not w.serving.chunked_prefill
    mine = _workload("vllm==0.6.3").model_copy(update={"mla_decode": MlaDecode.ABSORBED})
    assert with_engine(mine, None, None, m)[0].mla_decode is MlaDecode.ABSORBED


def test_a_given_engine_is_taken_as_it_is() -> None:
    m = ModelArrays.of(load_model("deepseek-v2-lite"))
    assert with_engine(_workload("vllm==0.6.3"), V0, None, m)[1] is V0


def test_device_defaults_apply_before_the_launch_rules() -> None:
    a100 = load_system("dgx-a100", 1).device
    m = ModelArrays.of(load_model("llama3-8b"))
    _, e = with_engine(_workload("vllm==0.9.1"), None, a100, m)
    assert e == resolve_defaults(on_device(load_engine("vllm-0.8"), a100), "vllm==0.9.1", max_model_len=8192)[0]


def test_release_ranges() -> None:
    assert stated_releases("vLLM 0.6.3.post1") == ((0, 6, 3), (0, 6, 4))
    assert stated_releases("vllm==0.7") == ((0, 7, 0), (0, 8, 0))
    assert stated_releases("vllm-0.6") is None and stated_releases("") is None
    tier = ReleaseDefaults(since="0.6", before="0.7.1")
    assert tier.covers((0, 7, 0), (0, 7, 1)) and not tier.covers((0, 7, 0), (0, 8, 0))
    assert not tier.covers((0, 5, 9), (0, 5, 10))


def test_a_release_range_can_set_the_mla_chunked_prefill_rule() -> None:
    tier = ReleaseDefaults(since="0.7.4", before="0.8", mla_without_chunked_prefill=False,
                           sources={"mla_without_chunked_prefill": "test"})
    e = V0.model_copy(update={"releases": (*V0.releases, tier)})
    assert resolve_defaults(e, "vLLM 0.7.4.dev181", mla=True, max_model_len=163840)[0].chunked_prefill
    assert not resolve_defaults(e, "vLLM 0.7.3", mla=True, max_model_len=163840)[0].chunked_prefill


def test_vllm_v1_memory_default_follows_the_release() -> None:
    # gpu_memory_utilization: 0.9 through 0.19.x, 0.92 from 0.20.0 (the vllm-0.8 profile's release range)
    engine = load_engine("vllm-0.8")
    assert resolve_defaults(engine, "vLLM 0.9.1")[0].memory_fraction == 0.9
    assert resolve_defaults(engine, "vLLM 0.19")[0].memory_fraction == 0.9
    assert resolve_defaults(engine, "vLLM 0.20.0")[0].memory_fraction == 0.92
    assert resolve_defaults(engine, "vLLM")[0].memory_fraction == 0.92  # no version: the latest releases'


def test_release_defaults_name_only_engine_fields() -> None:
    """`ReleaseDefaults.settings` passes every field but its range and sources to the Engine: each must be one."""
    fields = set(ReleaseDefaults.model_fields) - {"since", "before", "sources"}
    assert fields <= set(Engine.model_fields)
    tier = ReleaseDefaults(since="0.6", before="0.7.1", mla_decode=MlaDecode.EXPANDED, chunked_token_budget=512)
    assert tier.settings() == {"mla_decode": MlaDecode.EXPANDED, "chunked_token_budget": 512}
    assert tier.span == "releases 0.6 to before 0.7.1"


def test_device_tiers_set_only_engine_fields() -> None:
    """`DeviceDefaults.settings` passes every field but its device terms to the Engine: each must be one."""
    from armillary.serving.engine_tiers import _TIER_TERMS, DeviceDefaults

    assert set(DeviceDefaults.model_fields) - set(_TIER_TERMS) <= set(Engine.model_fields)
    h100 = load_system("dgx-h100", 1).device
    tier = DeviceDefaults(max_batch=256, memory_reserve_gib=8.0)
    memory = float(h100.hbm.capacity) / 2**30
    assert tier.settings(h100) == {"max_batch": 256, "memory_fraction": round((memory - 8.0) / memory, 3)}
