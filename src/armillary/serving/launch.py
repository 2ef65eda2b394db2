"""The engine as launched, and the workload it fills: the defaults of the release a run names, what the engine
derives from the model and the launch (`resolve_defaults`: the one source of these rules for `armillary serve`,
the API and the validation harness), and the workload's unset fields filled from it (`with_engine`)."""

from __future__ import annotations

from typing import Any

from armillary.errors import SpecError
from armillary.plan.arrays import ModelArrays
from armillary.serving.engine import Engine, load_engine, on_device
from armillary.serving.engine_versions import stated_releases
from armillary.specs.device import Device
from armillary.specs.workload import Inference


def resolve_defaults(engine: Engine, version: str = "", *, mla: bool = False, max_model_len: int | None = None,
                     attention_dp: int = 1, flags: dict[str, Any] | None = None) -> tuple[Engine, tuple[str, ...]]:
    """The engine as launched, and what it assumed in words: the one source of these rules for `armillary
    serve`, the API and the validation harness. In order: the defaults of the releases `version` names
    (`_with_releases`), the launch's `flags` (Engine fields the launch sets: a row's command line, a workload's
    chunked_prefill), then what the engine derives from the model and the launch where the flags leave it:
    chunked prefill for a model with multi-head latent attention (`mla`) or a context of `max_model_len`
    tokens (the model's unless the launch caps it; `_chunked_prefill`), and the token budget that goes with
    it, divided over `attention_dp` data-parallel attention groups (`_token_budget`)."""
    engine, notes, forcing = _with_releases(engine, version, mla)
    update = dict(flags or {})
    notes.extend(_chunked_prefill(engine, update, mla, max_model_len, forcing))
    notes.extend(_token_budget(engine, update, max_model_len, attention_dp))
    return engine.model_copy(update=update), tuple(notes)


def _with_releases(engine: Engine, version: str, mla: bool = False) -> tuple[Engine, list[str], str]:
    """The engine with the defaults of its `releases` whose range holds every release `version` names (none
    named: the profile's own), what that assumed for a model with multi-head latent attention (`mla`), and
    which releases force MLA's chunked prefill off, in words ("the profile" where no range set it)."""
    notes: list[str] = []
    span = stated_releases(version)
    forcing = "the profile"
    for tier in engine.releases:
        if span is None or not tier.covers(*span):
            continue
        tiered = tier.settings()
        engine = engine.model_copy(update=tiered)
        if "mla_forces_no_chunked_prefill" in tiered:
            forcing = tier.span
        if mla and "mla_decode" in tiered:
            notes.append(f"MLA decode {engine.mla_decode.value}: {tier.span} "
                         f"({tier.sources.get('mla_decode', 'the profile')})")
    return engine, notes, forcing


def _chunked_prefill(engine: Engine, update: dict[str, Any], mla: bool, max_model_len: int | None,
                     forcing: str) -> list[str]:
    """Set chunked prefill (and prefix caching) in `update` (the launch's flags) as the engine derives it from
    the model: off for multi-head latent attention whatever the flags (`mla_forces_no_chunked_prefill`) or
    where they leave it (`mla_without_chunked_prefill`), on for a context longer than
    `long_context_chunked_prefill_above`. Returns what it assumed."""
    notes: list[str] = []
    above = engine.long_context_chunked_prefill_above
    long_context = above is not None and max_model_len is not None and max_model_len > above
    if mla and engine.mla_forces_no_chunked_prefill:
        # vLLM 0.7.1-0.7.3, PR #12642: "MLA is enabled; forcing chunked prefill and prefix caching to be
        # disabled" (VllmConfig.__post_init__, after the flags are read: they have no effect)
        asked = update.get("chunked_prefill", engine.chunked_prefill or long_context)
        ignored = " and ".join(k.replace("_", " ") for k in ("chunked_prefill", "prefix_caching") if update.get(k))
        update.update(chunked_prefill=False, prefix_caching=False)
        notes.append(f"chunked prefill and prefix caching off: {engine.name} forces them off for a model with "
                     f"multi-head latent attention ({forcing})" + (f"; the launch's {ignored} ignored"
                                                                   if ignored else ""))
        if asked and engine.chunked_token_budget is not None and "max_batched_tokens" not in update:
            # SchedulerConfig set the chunked budget before the forcing, which left it (until PR #13620)
            notes.append(f"not modelled: vLLM kept the {engine.chunked_token_budget}-token budget of the chunked "
                         "prefill it turned off and refused longer prompts (PR #13620, after v0.7.3); the budget "
                         "here fits the whole context")
    if mla and engine.mla_without_chunked_prefill and "chunked_prefill" not in update:
        # vLLM V0 from PR #12639 (after v0.7.3): off by default for MLA (EngineArgs), a launch's flag kept; the
        # profile's source says what was read and what is inferred
        update["chunked_prefill"] = False
        notes.append(f"chunked prefill off: {engine.name} runs a model with multi-head latent attention without it")
    if long_context and "chunked_prefill" not in update:
        # vLLM V0 turns chunked prefill on by default above 32K context (EngineArgs.create_engine_config)
        update["chunked_prefill"] = True
        notes.append(f"chunked prefill on: {engine.name} turns it on for a context over {above} tokens "
                     f"({max_model_len})")
    return notes


def _token_budget(engine: Engine, update: dict[str, Any], max_model_len: int | None, attention_dp: int) -> list[str]:
    """Set the token budget in `update` where the launch sets none: with chunked prefill
    `chunked_token_budget`, without it max(`max_model_len`, `unchunked_token_budget_floor`); with
    data-parallel attention over `attention_dp` groups, the budget (the launch's too) divided by
    `attention_dp_budget_divisor`. Returns what it assumed."""
    if "max_batched_tokens" not in update:
        if update.get("chunked_prefill", engine.chunked_prefill):
            # V0's budget with chunked prefill: 512 in 0.6 (PR #4580), 2048 in 0.7 (SchedulerConfig, v0.7.3)
            if engine.chunked_token_budget is not None:
                update["max_batched_tokens"] = engine.chunked_token_budget
        elif (floor := engine.unchunked_token_budget_floor) is not None and max_model_len is not None:
            # V0 without chunked prefill: max_num_batched_tokens = max(max_model_len, 2048) (EngineArgs /
            # SchedulerConfig defaults, vLLM 0.6-0.7)
            update["max_batched_tokens"] = max(max_model_len, floor)
    divisor = engine.attention_dp_budget_divisor
    if attention_dp <= 1 or divisor == 1:
        return []
    # SGLang --enable-dp-attention: chunked_prefill_size // 2 (0.4.0-0.4.4), // dp_size from 0.4.4.post1
    # (ServerArgs.__post_init__ / _handle_data_parallelism; the profiles' sources)
    by = attention_dp if divisor == "groups" else divisor
    update["max_batched_tokens"] = max(update.get("max_batched_tokens", engine.max_batched_tokens) // by, 1)
    return [f"data-parallel attention: {engine.name} divides its token budget by {by} for each of the "
            f"{attention_dp} attention groups"]


def launched_engine(w: Inference, device: Device | None = None, m: ModelArrays | None = None,
                    attention_dp: int = 1, tp: int | None = None, pp: int = 1) -> Engine | None:
    """The engine the workload names (`serving.engine`; none: None) as it starts on `device` where given for a
    replica of `tp` x `pp` ranks (tp None: `engine.ASSUMED_TP`) with `attention_dp` attention groups
    (`on_device`: its memory share by these) and as launched for model `m` with those groups and the workload's
    own chunked_prefill (`resolve_defaults`, with the version `serving.engine` names)."""
    if w.serving.engine is None:
        return None
    named = load_engine(str(w.serving.engine))
    started = on_device(named, device, tp, pp, attention_dp) if device is not None else named
    launch = {k: getattr(w.serving, k) for k in ("chunked_prefill",) if k in w.serving.model_fields_set}
    return resolve_defaults(started, str(w.serving.engine), mla=m is not None and float(m.kv_lora) > 0,
                            max_model_len=int(float(m.max_seq_len)) if m is not None else None,
                            attention_dp=attention_dp, flags=launch)[0]


def with_engine(w: Inference, engine: Engine | None = None, device: Device | None = None,
                m: ModelArrays | None = None, attention_dp: int = 1, tp: int | None = None,
                pp: int = 1) -> tuple[Inference, Engine | None]:
    """The workload with its engine's defaults (`engine`, else the one it names as `launched_engine` launches
    it on `device` for a replica of `tp` x `pp` ranks with `attention_dp` attention groups) wherever it sets
    nothing itself, and the engine. An `engine` given is taken as it is (a validation
    row's has been resolved from the row's flags; a benchmark client's has the client's own settings)."""
    e = engine if engine is not None else launched_engine(w, device, m, attention_dp, tp, pp)
    if e is None:
        return w, None
    sv, kv = w.serving, w.kv_cache
    serving = {k: getattr(e, k) for k in ("policy", "chunked_prefill", "max_batch", "max_batched_tokens",
                                          "scheduler_steps")
               if k not in sv.model_fields_set}
    if not e.prefix_caching and sv.prefix_hit_rate > 0:
        raise SpecError(f"workload.serving.prefix_hit_rate: {e.name} does not cache prefixes (its profile's "
                        "prefix_caching is false): set it to 0, or give an engine with prefix_caching: true "
                        "(e.g. vLLM V0 launched with --enable-prefix-caching)")
    cache = {k: getattr(e, k) for k in ("block_tokens", "memory_fraction") if k not in kv.model_fields_set}
    top: dict[str, Any] = {"serving": sv.model_copy(update=serving), "kv_cache": kv.model_copy(update=cache)}
    for k in ("decode_attention", "mla_decode", "absorbed_mla_prefill", "block_fp8_kernels", "channel_fp8_kernels"):
        if k not in w.model_fields_set:
            top[k] = getattr(e, k)
    return w.model_copy(update=top), e
