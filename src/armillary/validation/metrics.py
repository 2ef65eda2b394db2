"""What a training row measured, in whatever words and unit its source used, as a function of our estimate.

Metric names vary ("end-to-end iteration time", "training step time", "TFLOP/s per GPU", "MFU",
"tokens/sec/GPU", "time to train", "GPU-hours"), units too (ms, s, h, days; per GPU, per node, total). The
FLOP convention of a TFLOP/s figure comes from the metric or its source: SC'21 Eq. 3 counts the recompute
forward pass, "hardware" FLOPs count every executed FLOP, otherwise model FLOPs (6N-style plus attention).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from armillary.estimate.result import StepEstimate
from armillary.validation.mlperf_rules import EvalRule, rule_for_row, stated_steps_disagree
from armillary.validation.reading import search_run
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import RowSpecs
from armillary.validation.vocabulary import clean

Reading = Callable[[StepEstimate, RowSpecs], float]

_SECONDS = {"us": 1e-6, "µs": 1e-6, "μs": 1e-6, "usec": 1e-6, "microsecond": 1e-6, "ms": 1e-3, "msec": 1e-3,
            "millisecond": 1e-3, "s": 1.0,
            "sec": 1.0, "second": 1.0, "min": 60.0, "minute": 60.0, "h": 3600.0, "hr": 3600.0, "hour": 3600.0,
            "day": 86400.0, "d": 86400.0}
# a unit that is a rate, not a time: "it/s" (tqdm's iterations per second), "steps/s", "samples per second"
_RATE_UNIT = re.compile(r"\b(it|iters?|iterations?|steps?|samples?|tokens?|tok|requests?|req)\s*(/|per)\s*"
                        r"(s|sec|second)\b")

# a rate of one device: "per GPU", "/GPU", "per H100", "per TPU chip" (a GPU's name, not a node of them: "per
# H100 node")
# ("HPU": Intel Gaudi's name for its device, as Habana's docs and optimum-habana print "per HPU")
PER_GPU = re.compile(r"(per|/)[\s-]*(gpu|hpu|device|accelerator|chip|card|tpu(?:\s+chip)?|[abh]\d{2,3}|gb[23]00|"
                     r"mi3\d\dx)\b(?![\s-]*(node|server|host|system|instance|rack|tray|pod)s?\b)")
# a rate over a longer time than a second: "tokens/day/GPU", "tokens per hour", "req/min" (never read as per second)
PER_LONGER_TIME = re.compile(r"(tokens?|tok|samples?|seqs?|sequences?|sentences?|requests?|req|queries|tps)\b[\w\s/-]*?"
                             r"(/|\bper)\s*(min|mins|minutes?|h|hr|hrs|hours?|days?)\b")


# a GPU count a rate names ("tok/s (8 GPUs)", "per 8x MI300X", "whole 8-GPU server"): it must be the row's
_GPUS_NAMED = re.compile(r"\b(\d+)\s*(?:x\s*|-)?\s*(?:gpus?|devices?|accelerators?|chips?|(?:amd\s*|nvidia\s*)?"
                         r"(?:mi3\d\dx|[abh]\d{2,3}|gb[23]00)\b)", re.I)


def refuse_other_gpu_count(row: dict[str, str], text: str) -> None:
    """Refuse a rate whose words count other GPUs than the row's ("tok/s (4 GPUs)" on an 8-GPU row: neither
    the server's nor one GPU's), naming the unit."""
    gpus = row.get("n_gpus", "").strip()
    if not gpus.isdigit():  # the metric alone (no row's GPUs to hold it to)
        return
    for found in _GPUS_NAMED.finditer(text):
        if int(found.group(1)) not in (1, int(gpus)):  # "per 1 GPU" is per GPU
            raise Unsupported(f"unit {row.get('unit')!r} / metric {row.get('metric')!r}: a rate over {found.group(1)} "
                              f"GPUs, not the row's {gpus} GPUs")


@dataclass(frozen=True)
class Metric:
    label: str  # what is compared, in the row's unit
    read: Reading  # the predicted value in the row's unit
    assumptions: tuple[str, ...] = ()  # what the reading assumed that the row does not state


_TIME_WORD = r"(ms|msec|s|sec|secs|seconds?|milliseconds?|us|µs|μs|usec|min|mins|minutes?|h|hrs?|hours?|days?)"


def unit_in_metric(text: str) -> str:
    """A time unit written in the metric rather than the unit column: "TTFT p50 (ms)", "TTFT (p50, s)", "Mean TTFT
    [s]" (in a parenthesis or brackets, alone or as one of its items), "TPOT in seconds", "time to train, h" (after
    a last comma)."""
    for inner in re.findall(r"[(\[]([^()\[\]]*)[)\]]", text):
        for item in re.split(r"[,;]", inner):
            if re.fullmatch(_TIME_WORD, item.strip()):
                return item.strip()
    found = re.search(rf"\bin {_TIME_WORD}\b|,\s*{_TIME_WORD}\s*$", text)
    return next((g for g in found.groups() if g), "") if found else ""


def time_unit(unit: str, default: str) -> float:
    """Seconds per unit of a time ("ms", "seconds", "s/it", "min"); `default` when the text names no unit at all.
    A rate ("it/s", "steps per second") is refused: it is the inverse of a time."""
    if _RATE_UNIT.search(unit):
        raise Unsupported(f"unit {unit!r}: a rate, not a time (ms, s, min, h, days)")
    words = re.findall(r"[a-zµ]+", unit) or [default]
    for w in words:
        key = w[:-1] if w.endswith("s") and w[:-1] in _SECONDS else w
        if key in _SECONDS:
            return _SECONDS[key]
    raise Unsupported(f"unit {unit!r}: not a time unit (ms, s, min, h, days)")


def _eq3_flop(rs: RowSpecs) -> float:
    """SC'21 Eq. 3: 96 B s l h^2 (1 + s/6h + V/16lh) FLOPs per iteration (counts the recompute forward)."""
    m, w = rs.model, rs.workload
    B, s, L, h, V = w.global_batch, w.seq_len, m.layers, m.hidden, m.vocab
    return 96 * B * s * L * h**2 * (1 + s / (6 * h) + V / (16 * L * h))


def _flop_convention(text: str, source: str) -> tuple[str, Callable[[StepEstimate, RowSpecs], float]]:
    if "eq" in text or "sc21" in source or "2104.04473" in source or "includes recompute" in text:
        return "SC'21 Eq. 3", lambda r, rs: _eq3_flop(rs)
    if "hardware" in text or "hfu" in text or re.search(r"\bhw\b", text):
        return "hardware", lambda r, rs: float(r.hardware_flop)
    return "model", lambda r, rs: float(r.model_flop)


def _per(text: str, unit: str, row: dict[str, str]) -> tuple[str, Callable[[RowSpecs], float]]:
    """Whose throughput a rate is: per GPU, per node, per TP group / replica, or the whole job."""
    both = f"{text} {unit}"
    whole = r"\b(total|aggregate|cluster|whole|all gpus|global)\b"
    if (PER_GPU.search(text) and re.search(whole, unit)) or (PER_GPU.search(unit) and re.search(whole, text)):
        # "per_device_tflops" over "TFLOP/s (cluster)": the metric and the unit say different things
        raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: one says per GPU, the other the "
                          "whole job")
    if PER_GPU.search(both):
        return "per GPU", lambda rs: float(rs.system.devices)
    if re.search(r"(per|/)[\s-]*(node|server|host)\b", both):
        return "per node", lambda rs: rs.system.devices / rs.system.devices_per_node
    if re.search(r"(per|/)[\s-]*(tp group|model replica|replica)\b", both):
        return "per replica", lambda rs: float(rs.strategy.dp or rs.system.devices // (
            rs.strategy.tp * rs.strategy.cp * rs.strategy.pp))
    if re.search(r"total|aggregate|cluster|whole|all gpus|global", both):
        return "total", lambda rs: 1.0
    raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: per GPU or total not stated")


def read_metric(row: dict[str, str]) -> Metric:
    """The measured quantity of a training row; Unsupported names the metric and unit when unknown."""
    # MaxText's and torchtitan's logged keys ("per_device_tflops", "per_device_tokens_per_sec") in words
    text, unit = clean(row.get("metric")).replace("_", " "), clean(row.get("unit")).replace("_", " ")
    source = clean(row.get("source")) + " " + clean(row.get("id"))
    if re.search(r"(forward|fwd).*(backward|bwd).*(one|single|per) (transformer )?layer", text):
        k = time_unit(unit, "ms")
        return Metric("layer fwd+bwd [row unit]", lambda r, rs: float(r.layer.total_s) / k)
    # MLPerf's "time to train" (also "time-to-train", "TTT", "time to convergence")
    if re.search(r"time[- ]to[- ](train|converge(nce)?)|\bttt\b|training time|wall[- ]?clock|gpu[- ]?hours", text):
        return _time_to_train(row, gpu_hours=bool(re.search(r"gpu[- ]?hours", text)))
    # "step time", "time per iteration", "seconds/iteration", "s/it", "sec/step", NeMo's logged train_step_timing
    if re.search(r"(iteration|step|batch)[- _]?tim(e|ing)|time (per|of one|of an?) (iteration|step)|"
                 r"\b(seconds|sec|s|ms|msec)\s*(per|/)\s*(iteration|iter|it|step)\b", text):
        k = time_unit(unit or text, "s")
        return Metric("step time [row unit]", lambda r, rs: float(r.step_time_s) / k)
    # a utilisation is a percentage when the unit says so, or (no unit) when the value is above 1.5
    # FLOPs counted without attention ("6N" per token, "6ND", "MFU without attention") are not the model FLOPs the
    # estimate counts (6N-style plus attention: PaLM's Appendix B MFU, Korthikanti et al. 2022): refused, not read
    if re.search(r"\b6\s*n\s*d?\b|\b(without|excluding|excl\.?|no|w/o)\s+(the\s+)?(self[- ])?attention", text) and (
            re.search(r"\b(mfu|hfu)\b|flop|utili[sz]ation", text + " " + unit)):
        raise Unsupported(f"metric {row.get('metric')!r}: FLOPs counted without attention (6N per token) are not the "
                          "model FLOPs compared (6N-style plus attention)")
    percent = "%" in unit or "percent" in unit or (not unit and float(row.get("value") or 0) > 1.5)
    scale = 100.0 if percent else 1.0
    if re.search(r"\bhfu\b|hardware flops? utili[sz]ation", text):
        return Metric("HFU", lambda r, rs: scale * float(r.hfu))
    if re.search(r"\bmfu\b|model flops? utili[sz]ation", text):
        return Metric("MFU", lambda r, rs: scale * float(r.mfu))
    # the multiples spelled out: SC'21's "Achieved teraFLOP/s per GPU", "Achieved aggregate petaFLOP/s"
    text, unit = (re.sub(r"\b(giga|tera|peta|exa)(?=flop)", lambda m: m.group(1)[0], t) for t in (text, unit))
    if re.search(r"[gtpe]flop", text + " " + unit) or (re.search(r"\bflop", text) and "flop" in unit):
        if "fusion" in text:
            raise Unsupported(f"metric {row.get('metric')!r}: operator fusion on/off is not modelled")
        convention, flop = _flop_convention(text, source)
        per, share = _per(text, unit, row)
        # the multiple the unit column names ("GFLOP/s", "PFLOP/s"), else the metric's; TFLOP/s where neither does
        prefix = next((m.group(1) for t in (unit, text) if (m := re.search(r"\b([gtpe])flop", t))), "t")
        scale = {"g": 1e9, "t": 1e12, "p": 1e15, "e": 1e18}[prefix]
        return Metric(f"{convention} {prefix.upper()}FLOP/s {per}",
                      lambda r, rs: flop(r, rs) / float(r.step_time_s) / share(rs) / scale)
    both = text + " " + unit
    # "tokens per GPU per second", "TGS" (tokens per GPU per second, InternEvo's and others' name)
    both = re.sub(r"\b(tokens?|tok|samples?)\s*(/|per)\s*(gpu|device)\s*(/|per)\s*(s|sec|second)\b", r"\1/s/gpu",
                  both)
    both = re.sub(r"\btgs\b", "tokens/s/gpu", both)
    if re.search(r"\b(it|iters?|iterations?|steps?)\s*(/|per)\s*(s|sec|second)\b", both):
        raise Unsupported(f"metric {row.get('metric')!r} / unit {row.get('unit')!r}: iterations per second are "
                          "not read (a rate of steps, not of tokens or samples)")
    if PER_LONGER_TIME.search(both):
        raise Unsupported(f"unit {row.get('unit')!r} / metric {row.get('metric')!r}: a rate per minute, hour or day; "
                          "rates are read per second")
    thousands = _multiple(both, row)
    # ("sentences/sec": Intel Gaudi's model tables count a training sample so)
    if re.search(r"(samples?|sequences?|seqs?|sentences?)\s*(/|per)\s*(s|sec|second)\b", both):
        per, share = _per(text, both, row)
        return Metric(f"samples/s {per}" + _times(thousands),
                      lambda r, rs: float(r.tokens_per_s) / rs.workload.seq_len / share(rs) / thousands)
    if re.search(r"(tokens?|tok)\s*(/|per)\s*(s|sec|second)\b|\btps\b|throughput", both):
        per, share = _per(text, both, row)
        return Metric(f"tokens/s {per}" + _times(thousands),
                      lambda r, rs: float(r.tokens_per_s) / share(rs) / thousands)
    raise Unsupported(f"metric {row.get('metric')!r} ({row.get('unit')!r}) is not predicted")


def _multiple(text: str, row: dict[str, str]) -> float:
    """The multiple a rate is written in: 1e3 for "k tokens/s", "ktok/s", "thousand samples/s", 1e6 for "M
    tokens/s"; 1 otherwise."""
    if re.search(r"\b(k|thousands?( of)?)\s*(tokens?|tok|samples?|seqs?|sequences?)\b", text):
        return 1e3
    if re.search(r"\b(m|millions?( of)?)\s*(tokens?|tok|samples?|seqs?|sequences?)\b", text):
        return 1e6
    # a table's multiplier in a parenthesis: "tokens/s/GPU (x1000)", "(K)", "(×10^3)", "(thousands)", "(M)"
    found = re.search(r"\(\s*(?:(?:x|×)\s*(1,?000|10\^?3|1e3|1,?000,?000|10\^?6|1e6)|(k|thousands?)|"
                      r"(m|millions?))\s*\)", text)
    if found:
        return 1e6 if found.group(3) or (found.group(1) and re.search(r"000,?000|6$", found.group(1))) else 1e3
    return 1.0


def _times(multiple: float) -> str:
    return "" if multiple == 1.0 else f" (in {multiple:g}s)"


# Time to train and GPU-hours from a row that states how much it trained, as its source words it ("1,000
# training steps", "trained on 300B tokens", "1.2M samples to converge" as MLPerf gives them, "non-step
# overhead 12 min"): steps x step time plus the stated time outside the steps. Steps from tokens divide by the
# global batch's tokens, from samples by the global batch. Nothing stated: the row cannot run (never a guess).
_SCALE = {"": 1.0, "k": 1e3, "thousand": 1e3, "m": 1e6, "million": 1e6, "b": 1e9, "billion": 1e9, "t": 1e12,
          "trillion": 1e12}
_NUMBER = r"(\d[\d,]*(?:\.\d+)?)\s*(k|thousand|m|million|b|billion|t|trillion)?\b"
# (what is counted, patterns whose first groups are the number and its scale)
_TRILLION = r"1e12|1 ?t|(?:1 )?trillion"
_AMOUNTS = (
    ("steps", (rf"{_NUMBER}\s*(?:training |optimizer )?(?:steps|iterations)\b(?!\s*(?:/|per))",
               rf"(?:steps|iterations) to (?:train|converge(?:nce)?)\s*[:=]?\s*{_NUMBER}")),
    ("tokens", (rf"(?:trained on|training on|total training tokens\s*[:=]?)\s*{_NUMBER}\s*(?:tokens)?",
                rf"(?:trained tokens|tokens trained)(?: per run)?\s*[:=]\s*{_NUMBER}",
                rf"(?:per|/)\s*({_TRILLION})()\s*(?:training )?tokens\b",  # a GPU-hours-per-trillion metric
                rf"{_NUMBER}\s*(?:training|train) tokens\b", rf"{_NUMBER}\s*tokens (?:in total|to train)\b")),
    ("samples", (rf"{_NUMBER}\s*(?:training )?(?:samples|sequences) to (?:train|converge)\b",
                 rf"(?:samples|sequences) to (?:train|converge)\s*[:=]?\s*{_NUMBER}",
                 rf"trained on {_NUMBER}\s*(?:samples|sequences)\b")),
)
_OVERHEAD = (r"(?:non[- ]step|initiali[sz]ation|init|startup|evaluation|eval|checkpoint(?:ing)?) "
             r"(?:overhead |time )?(?:of |took |:|=)?\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|seconds?|min|minutes?|h|hours?)\b")


def _amount(text: str) -> tuple[str, float] | None:
    """What the run trained, read only from clauses about the run itself ("eval every 20 steps" is not)."""
    for what, patterns in _AMOUNTS:
        for pattern in patterns:
            found = search_run(pattern, text)
            if found:
                number = found.group(1)
                if re.fullmatch(_TRILLION, number):
                    return what, 1e12
                return what, float(number.replace(",", "")) * _SCALE[found.group(2) or ""]
    return None


def _overhead_s(text: str) -> float:
    return sum(float(n) * time_unit(u, "s") for n, u in re.findall(_OVERHEAD, text))


# Evaluation inside the timed run, as a row words its cadence: "eval every 24576 sequences on 24567 eval samples"
# (MLPerf Training GPT-3: the MLLOG block_start epoch_count of 24576 x 2048 tokens between evaluations, each on
# the 24567 eval_samples the log states; run_stop follows the last evaluation, so run_start..run_stop holds one
# evaluation per interval trained). Only a cadence with its sample count is read; "eval every 20 steps" is not.
# A row naming MLPerf Training, a benchmark and a round that states no cadence gets the round's rule
# (`mlperf_rules`, data/mlperf_eval_rules.csv), recorded in its assumptions; a stated cadence wins.
_EVAL = (r"eval(?:uation)? every\s*([\d,]+)\s*(?:training )?(?:sequences|samples)\s*on\s*([\d,]+)\s*"
         r"(?:eval(?:uation)? )?(?:sequences|samples)\b")


def _evaluation(text: str) -> tuple[float, float] | None:
    """(sequences trained between evaluations, sequences each evaluation runs forward) that the row states."""
    found = re.search(_EVAL, text)
    return None if found is None else (float(found.group(1).replace(",", "")), float(found.group(2).replace(",", "")))


def forward_share(r: StepEstimate) -> float:
    """The forward pass's share of a layer's forward and backward kernel time (the MoE layer's where the model
    has one): an evaluation sequence costs this share of a trained sequence's forward_backward time (no backward,
    no recomputation, no optimizer)."""
    layer = r.moe_layer if r.moe_layer is not None else r.layer
    f, bi, bw = (float(p.time_s) for p in (layer.forward, layer.backward_input, layer.backward_weight))
    return f / (f + bi + bw)


def _row_gbs(row: dict[str, str]) -> int | None:
    try:
        return int(float((row.get("gbs") or "").replace(",", "")))
    except ValueError:
        return None


def _mlperf_rule(row: dict[str, str], text: str) -> tuple[EvalRule | None, tuple[str, ...]]:
    """The MLPerf Training rule of a row that states no cadence, with what it records: the rule applied (and any
    step cadence the row words that disagrees with it), or the benchmark/round the data does not hold."""
    rule, gap = rule_for_row(row)
    if rule is None:
        return None, () if gap is None else (gap,)
    disagree = stated_steps_disagree(text, rule, _row_gbs(row))
    return rule, (rule.words(),) if disagree is None else (rule.words(), disagree)


def _time_to_train(row: dict[str, str], gpu_hours: bool) -> Metric:
    """Time to train (in the row's time unit) or GPU-hours: the stated steps (or tokens, or samples) times the
    step time, plus the stated time outside the steps, plus the evaluations inside the timed run (stated, or
    by the MLPerf Training round's rule)."""
    text = clean(" ".join(row.get(k, "") for k in ("metric", "other_reported", "notes")))
    amount = _amount(text)
    if amount is None:
        raise Unsupported(f"metric {row.get('metric')!r}: time to train needs the steps, tokens or samples "
                          "trained, which neither the row's other_reported nor its notes state")
    what, value = amount
    extra = _overhead_s(text)
    evaluation = _evaluation(text)
    rule, assumed = (None, ()) if evaluation is not None else _mlperf_rule(row, text)

    def steps(rs: RowSpecs) -> float:
        w = rs.workload
        per_step = {"steps": 1.0, "tokens": w.global_batch * w.seq_len, "samples": w.global_batch}[what]
        return value / per_step

    def evaluated_sequences(rs: RowSpecs) -> float:
        """Sequences run forward by the evaluations inside the timed run, in the row's sequence length: one
        evaluation per interval trained (stated), or the rule's count (less those it skips), each on the
        evaluation set (the rule's sequences scaled by their length over the row's)."""
        gbs = rs.workload.global_batch
        if evaluation is not None:
            interval, samples = evaluation
            return steps(rs) * gbs / interval * samples
        if rule is not None:
            return rule.evaluations(steps(rs), gbs) * rule.eval_sequences * rule.eval_seq_len / rs.workload.seq_len
        return 0.0

    def evaluating_s(r: StepEstimate, rs: RowSpecs) -> float:
        """The evaluations' forward passes: each sequence at the forward share of a trained sequence's time."""
        return evaluated_sequences(rs) / rs.workload.global_batch * float(r.breakdown.forward_backward) \
            * forward_share(r)

    label = what if evaluation is None else f"{what}; evaluation every {evaluation[0]:g} sequences on {evaluation[1]:g}"
    if rule is not None:
        label = (f"{what}; evaluation per MLPerf Training {rule.round} rules: every {rule.interval_sequences} "
                 f"sequences on {rule.eval_sequences}x{rule.eval_seq_len}")

    if gpu_hours:
        return Metric(f"GPU-hours ({value:g} {label})",
                      lambda r, rs: (steps(rs) * float(r.step_time_s) + evaluating_s(r, rs) + extra)
                      * rs.system.devices / 3600.0, assumed)
    unit = clean(row.get("unit")) or unit_in_metric(clean(row.get("metric"))) or "min"
    k = time_unit(unit, "min")
    return Metric(f"time to train [{unit}] ({value:g} {label})",
                  lambda r, rs: (steps(rs) * float(r.step_time_s) + evaluating_s(r, rs) + extra) / k, assumed)
