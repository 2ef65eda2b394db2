"""Where in a row's words a value may be read from.

A row's free text mixes what the measured run did with what it did not: "eval every 20 steps" beside the
tokens it trained, "Storage: 2x ConnectX-7" beside the compute NICs, "vs 1.2 s without overlap" beside the
measured time. A number is only taken from a clause about the measured run; a clause about evaluation,
storage or management networks, a comparison run, a warm-up or another phase is never read for it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

# clauses end at ';', a full stop, a comma before a blank, a line break; a parenthesis is a clause of its own
_CLAUSE_END = re.compile(r";|\.(?=\s|$)|,(?=\s)|\n")
_PARENTHESIS = re.compile(r"\(([^()]*)\)")
# what makes a clause about something other than the measured run
UNRELATED = re.compile(
    r"\b(eval(uation|uated|s)?|validation|storage|management|mgmt|front[- ]?end (network|nic)|"
    r"warm[- ]?up|compared? (to|with)|comparison|vs\.?|versus|baseline|previous|earlier|instead of|"
    r"would|if (it|we|they)|ramp(ed|ing)?|says|according to)\b")


def clauses(text: str) -> list[str]:
    """The clauses of `text`, stripped, empty ones dropped; "tokens per run (last eval): 12" gives
    "tokens per run : 12" and "last eval"."""
    inner = _PARENTHESIS.findall(text)
    outer = _PARENTHESIS.sub(" ", text)
    return [c.strip() for part in (outer, *inner) for c in _CLAUSE_END.split(part) if c.strip()]


def about_the_run(text: str) -> list[str]:
    """The clauses of `text` that are not about something other than the measured run (`UNRELATED`)."""
    return [c for c in clauses(text) if not UNRELATED.search(c.lower())]


def search_run(pattern: str, text: str, flags: int = re.I) -> re.Match[str] | None:
    """The first match of `pattern` within one clause about the measured run (never across clauses)."""
    for clause in about_the_run(text):
        found = re.search(pattern, clause, flags)
        if found:
            return found
    return None


@dataclass(frozen=True)
class Reading:
    """A value read from a row: the column, the words it came from and how sure the reading is."""

    column: str
    value: int | None
    words: str  # the column's text
    how: str  # "stated" (a bare number), "qualified" (a number with words around it), "not stated"


# the names a column's value may be written after ("EP=8", "TP8", "micro batch 2"), in Megatron's and the
# frameworks' spellings
_LABELS = {
    "tp": r"tp|tensor[-_ ]?(?:model[-_ ]?)?parallel(?:[-_ ]size)?",
    "pp": r"pp|pipeline[-_ ]?(?:model[-_ ]?)?parallel(?:[-_ ]size)?",
    "dp": r"dp|data[-_ ]?parallel(?:[-_ ]size)?", "cp": r"cp|context[-_ ]?parallel(?:[-_ ]size)?",
    "ep": r"ep|expert[-_ ]?(?:model[-_ ]?)?parallel(?:[-_ ]size)?",
    "vpp": r"vpp|vp|virtual[-_ ]?pipeline(?:[-_ ]model[-_ ]parallel[-_ ]size)?",
    "mbs": r"mbs|micro[-_ ]?batch(?:[-_ ]size)?", "gbs": r"gbs|global[-_ ]?batch(?:[-_ ]size)?",
    # "seq len", "seq_length" (Megatron), "Seq.Len" (NeMo's performance tables)
    "seq": r"seq(?:uence)?[-_. ]?(?:len(?:gth)?)?",
    # "ISL 1024", "isl=1024", "input length 1024", "--random-input-len 1024", "prompt length 1024"
    "isl": r"isl|(?:random[-_ ])?input[-_ ]?(?:seq(?:uence)?[-_ ]?)?len(?:gth)?|prompt[-_ ]?len(?:gth)?",
    "osl": r"osl|(?:random[-_ ])?output[-_ ]?(?:seq(?:uence)?[-_ ]?)?len(?:gth)?",
    # a model's shape as Hugging Face config.json keys ("hidden_size: 4096", "num_key_value_heads: 8",
    # "n_routed_experts: 256", "num_experts_per_tok: 8"), Megatron's arguments ("--ffn-hidden-size",
    # "num_query_groups", "moe_router_topk") and Meta's params.json ("dim", "n_layers", "n_heads", "n_kv_heads")
    "layers": r"num[-_ ]?hidden[-_ ]?layers|n[-_]?layers|num[-_ ]?layers|layers",
    "hidden": r"hidden[-_ ]?size|d[-_]?model|n[-_]?embd|dim|hidden",
    "heads": r"num[-_ ]?attention[-_ ]?heads|n[-_]?heads|num[-_ ]?heads|heads",
    "kv_heads": r"num[-_ ]?key[-_ ]?value[-_ ]?heads|n[-_]?kv[-_]?heads|num[-_ ]?kv[-_ ]?heads|"
                r"num[-_ ]?query[-_ ]?groups|kv[-_ ]?heads",
    "ffn": r"(?<!moe_)intermediate[-_ ]?size|ffn[-_ ]?hidden[-_ ]?size|ffn[-_ ]?dim|d[-_]?ff|ffn",
    "vocab": r"(?:padded[-_ ]?)?vocab(?:ulary)?[-_ ]?size|vocab(?:ulary)?",
    "experts": r"n[-_]?routed[-_]?experts|num[-_ ]?(?:local[-_ ]?)?experts|num[-_ ]?moe[-_ ]?experts|experts",
    "topk": r"num[-_ ]?experts[-_ ]?per[-_ ]?tok(?:en)?|moe[-_ ]?router[-_ ]?topk|top[-_ ]?k|top-?",
}
# a short label's "size" or "degree" ("TP size 8", "EP degree 8")
_SIZE_WORD = r"(?:[-_ ](?:size|degree))?"
# the columns that hold a length in tokens, where "8K" is read as 8 x 1024
TOKEN_LENGTHS = ("seq", "isl", "osl")
# the columns of a training row's layout whose number, written in words the reader cannot place ("per-device
# batch 1", "context 4k", "TP=1, PP=16" in ep), is refused rather than taken as not stated (and then assumed)
_LAYOUT_COLUMNS = ("n_gpus", "seq", "gbs", "mbs", "tp", "pp", "cp", "ep", "vpp")
# likewise a model's shape (a shape left unstated is filled from a preset or kv_heads = heads: a misread); an ffn
# column that names its experts' width ("dense 18432 / expert 2048", "moe_intermediate_size: 2048") is read by the
# MoE reader instead
_SHAPE_COLUMNS = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "experts", "topk")
# a number with thousands separators at the start ("1,344", "10,752 GPUs": MLPerf's and papers' tables)
_THOUSANDS = re.compile(r"^(\d{1,3}(?:,\d{3})+)(?![\d,])")


class BadValueError(ValueError):
    """A column the harness cannot take: several values ("3072 -> 15360"), or a count that is not a whole
    number of 1 or more ("0", "inf", "-5"); the caller refuses the row naming the column."""


def read_int(row: dict[str, str], column: str) -> Reading:
    """An integer column: a bare number ("stated"), a number with its qualifier ("12 (model parallel)", "4
    instances": "qualified"), or nothing ("not stated" for an empty column or one not led by a number).
    Several values, or a count that is not a whole number of 1 or more, raise BadValueError."""
    text = row.get(column, "").strip()
    words = text
    text = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), text)
    if column == "dp" and re.match(r"-1(?![\d.])", text):
        # torchtitan's data_parallel_shard_degree -1: the ranks left over by the other degrees (its config
        # documentation: "-1 means leftover ranks"), which the reader derives from n_gpus as for an empty dp
        return Reading(column, None, words, "not stated")
    try:
        number = float(text)
    except ValueError:
        number = None
    if number is not None:
        if not (math.isfinite(number) and number >= 1):  # every count of a row is a whole number >= 1
            raise BadValueError(f"{column}: expected a whole number of 1 or more, got {text!r}")
        return Reading(column, int(number), text, "stated")
    if re.match(r"-\s*\d", text):
        raise BadValueError(f"{column}: expected a whole number of 1 or more, got {text[:40]!r}")
    # "EP=8", "TP 8", "mbs: 2", "TP size 8": the column's own name before its number
    label = _LABELS.get(column, r"(?!)")
    text_read = re.sub(rf"^-*(?:{label}){_SIZE_WORD}\s*[=:]?\s*(?=\d)", "", text, flags=re.I)
    found = re.match(r"(\d+(?:\.\d+)?)(?![\d.])(.*)", text_read)
    if found is None:
        return _labelled_elsewhere(column, label, words)
    if column == "ep" and re.match(r"\s*(?:routed |local )?experts?\b", found.group(2), re.I):
        raise BadValueError(f"ep: {words[:40]!r} counts experts, not the expert-parallel degree")
    if float(found.group(1)) < 1:
        raise BadValueError(f"{column}: expected a whole number of 1 or more, got {text[:40]!r}")
    if re.match(r"\s*(?:k|m)?\s*(?:-|–|—|~|to\b)\s*\d", found.group(2), re.I) or "±" in found.group(2):
        # "4-8", "1k-8k", "256 to 512", "3200 ± 10%": a range or a spread, not the run's one value
        raise BadValueError(f"{column}: {text[:40]!r} is a range or a spread; the run's one value is needed")
    if column in ("isl", "osl") and re.search(r"\bmax(imum)?\b|\bup to\b|\bcap(ped)?\b|\blimit\b",
                                              found.group(2), re.I):
        # "800 (max)", "up to 800": a cap on the length (max_tokens), not the length; a request may stop before it
        raise BadValueError(f"{column}: {text[:40]!r} is a cap on the length, not the length")
    multiple = re.match(r"\s*(k|m|b|thousand|million|billion)\b", found.group(2), re.I)
    if multiple and column in TOKEN_LENGTHS and multiple.group(1).lower() == "k" and "." in found.group(1):
        # "3.2K": 3,200 or 3.2 x 1024 (3,277)? A length in K is a power of two only when whole
        raise BadValueError(f"{column}: {text[:40]!r} is a fraction of K; the number of tokens is needed")
    if multiple and column in TOKEN_LENGTHS and multiple.group(1).lower() == "k":
        # a token length in K is a power of two: Llama 3's "8K" context is 8192 positions, "128K" 131072
        # (Hugging Face config.json max_position_embeddings)
        return Reading(column, round(float(found.group(1)) * 1024), text, "qualified")
    if multiple:
        raise BadValueError(f"{column}: {text[:40]!r} is written in thousands or millions; the number is needed")
    if float(found.group(1)) != int(float(found.group(1))):  # "3.25 x hidden", "2.5 (avg)": not a count
        raise BadValueError(f"{column}: expected a whole number of 1 or more, got {text[:40]!r}")
    rest = re.sub(r"\([^()]*\)", " ", found.group(2))  # a parenthesised qualifier is not a second value
    if column in ("gbs", "mbs") and re.search(r"\btok(en)?s?\b", rest, re.I):
        raise BadValueError(f"{column}: {text[:40]!r} counts tokens; the batch is read in sequences")
    if column in (*_LAYOUT_COLUMNS, "dp"):
        _other_degrees_agree(row, column, text, rest)
    if re.search(r"->|→|\bto\s*\d|\bx\s*\d|[*×/+]\s*\d|,\s*\d|\bor\s*\d", rest):
        raise BadValueError(f"{column}: {text!r} holds more than one value")
    return Reading(column, int(float(found.group(1))), text, "qualified")


_DEGREE_COLUMNS = {"tp": "tp", "pp": "pp", "dp": "dp", "cp": "cp", "ep": "ep", "vp": "vpp", "vpp": "vpp"}


def _other_degrees_agree(row: dict[str, str], column: str, text: str, rest: str) -> None:
    """A second degree written beside a column's own ("TP8EP4", "TP4 PP8": InferenceMAX's and Megatron-Bridge's
    compact layouts) is taken only where that degree's own column states the same number; else the column is
    refused (a "DP2" that no dp column states, an "EP2" beside an ep of n/a); a degree of 1 beside an empty column
    is that column's default."""
    for found in re.finditer(r"\b(tp|pp|dp|cp|ep|etp|vpp?)\s*[=:]?\s*(\d+)", rest, re.I):
        other = _DEGREE_COLUMNS.get(found.group(1).lower())
        if other is None or other == column:
            raise BadValueError(f"{column}: {text[:40]!r} holds more than one value")
        stated_there = re.match(rf"\s*(?:{_LABELS.get(other, '(?!)')})?{_SIZE_WORD}\s*[=:]?\s*(\d+)\b",
                                row.get(other, ""), re.I)
        if stated_there is None and found.group(2) == "1" and not row.get(other, "").strip():
            continue  # "EP1" beside an empty ep: the degree of a column left empty
        if stated_there is None or stated_there.group(1) != found.group(2):
            raise BadValueError(f"{column}: {text[:40]!r} names {found.group(1)} {found.group(2)}, which the {other} "
                                f"column does not state ({row.get(other, '')!r})")


def _labelled_elsewhere(column: str, label: str, words: str) -> Reading:
    """A column not led by its number: the one value its own name labels anywhere in it ("TP=8, PP=1" in pp,
    "GBS=4, MBS=4" in mbs: a configuration line pasted into each column), else not stated; a layout column
    (`_LAYOUT_COLUMNS`) whose words hold a number it cannot place is refused."""
    values = {m.group(1) for m in re.finditer(rf"(?<![a-z0-9_])(?:{label}){_SIZE_WORD}\s*[=:]?\s*(\d+)"
                                              r"(?![\d.]|,\d|\s*(?:k|m|b|thousand|million|billion)\b)", words, re.I)}
    if len(values) == 1:
        return Reading(column, int(values.pop()), words, "qualified")
    if len(values) > 1:
        raise BadValueError(f"{column}: {words[:40]!r} holds more than one value")
    # a number standing alone ("per-device batch 1", "context 4k"), not one inside a name ("ZeRO-1 DP", "1F1B")
    unplaced = column in _LAYOUT_COLUMNS or (column in _SHAPE_COLUMNS and not (
        column == "ffn" and re.search(r"\bexperts?\b|moe[-_ ]?intermediate", words, re.I)))
    if unplaced and re.search(r"(?<![\w.-])\d+(?:\.\d+)?[km]?\b", words, re.I) and not re.match(
            r"(n/?a|not (stated|given|reported|published)|per recipe|default)\b", words.strip(), re.I):
        raise BadValueError(f"{column}: {words[:40]!r} holds a number the column's reader cannot place (a number, "
                            f"or the column's name and its number: '8', 'TP=8', 'tensor parallel 8')")
    return Reading(column, None, words, "not stated")


# a run that keeps its weights in fp8 only: NeMo's fp8_params, Megatron-LM's --fp8-param-gather, Transformer
# Engine's fp8_model_init, or the words ("FP8 params", "FP8 parameters", "fp8 param gather")
_FP8_PARAMS = re.compile(r"fp8[ _-]?(params?|parameters)\b|fp8[ _-]param[ _-]gather|fp8_model_init", re.I)
_NOT_FP8_PARAMS = re.compile(r"\b(no|without|not)\s+fp8[ _-]?param|fp8_params\s*[:=]\s*(false|0)\b", re.I)


def fp8_params_stated(row: dict[str, str]) -> bool:
    """Whether the row says, in a clause about the measured run, that its weights were kept in fp8
    (`Strategy.fp8_params`): "FP8 params", "--fp8-param-gather", "fp8_params: True" in its precision,
    framework or notes; "no FP8 params" and "fp8_params: False" say the opposite."""
    text = "; ".join(row.get(column, "") for column in ("precision", "framework", "notes"))
    return search_run(_FP8_PARAMS.pattern, text) is not None and search_run(_NOT_FP8_PARAMS.pattern, text) is None


def eager_fp32_loss_stated(row: dict[str, str]) -> bool:
    """Whether the row says its loss ran as an eager fp32 cross-entropy (`Strategy.cross_entropy`
    eager_fp32: the logits cast to fp32 and PyTorch's F.cross_entropy run op by op) in a clause about the run."""
    text = "; ".join(row.get(column, "") for column in ("framework", "notes"))
    return search_run(r"\beager fp32 cross[- ]entropy\b", text) is not None
