"""The columns of a measured training row read as numbers, and the refusal of a row that cannot be run yet."""

from __future__ import annotations

import re

from armillary.validation.reading import BadValueError, read_int


class Unsupported(Exception):  # noqa: N818 - a reason, not a failure
    """The row cannot be run yet; the message says why."""


SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")  # a model's shape columns


# words after a GPU count that say it counts something else: "16 nodes", "4 hosts", "8 x DGX H100", "2 racks";
# "512 TensorCores", "512 cores": a TPU v4 / v5p chip has two TensorCores (Google's "v5p-512" is 256 chips)
_NOT_GPUS = re.compile(r"\s*(?:x\s*)?(?:nodes?|hosts?|servers?|machines?|systems?|racks?|trays?|instances?|pods?|"
                       r"boxes|dgx|hgx|(?:tensor[- ]?)?cores?)\b", re.I)


# a TPU v4 / v5p slice's name counts TensorCores, two per chip ("v5p-4096" is 2048 chips: Google Cloud's TPU v5p
# and v4 documentation; MLPerf Training v4.1's "tpu-v5p-4096" system ran 2048 chips); v5e / v6e names count chips
_TPU_CORE_SLICE = re.compile(r"\bv(?:4|5p)-\d+", re.I)


def int_column(row: dict[str, str], key: str) -> int | None:
    """An integer column of a row (`reading.read_int`): a number, or a number with its qualifier; None when
    empty or not led by a number. A column holding several values, or an n_gpus that counts nodes or systems
    ("16 nodes", "8 x DGX H100"), is refused naming the column."""
    try:
        reading = read_int(row, key)
    except BadValueError as err:
        raise Unsupported(str(err)) from None
    if key == "n_gpus" and reading.how == "qualified":
        rest = re.match(r"\s*\d+(?:\.\d+)?(.*)", reading.words)
        if rest and _NOT_GPUS.match(rest.group(1)):
            raise Unsupported(f"n_gpus: {reading.words!r} counts nodes or systems, not GPUs")
        if rest and _TPU_CORE_SLICE.search(rest.group(1)) and not re.match(r"\s*chips?\b", rest.group(1), re.I):
            raise Unsupported(f"n_gpus: {reading.words!r} names a TPU v4 / v5p slice, whose size counts TensorCores "
                              "(two per chip): the chips are needed")
    if key == "kv_heads" and reading.value is None:
        said = reading.words.lower()
        # multi-query attention keeps one key / value head (Shazeer 2019, arXiv:1911.02150; PaLM); grouped-query
        # attention (Ainslie et al. 2023) names no group count by itself: never kv_heads = heads
        if re.search(r"\bmqa\b|multi[- ]query", said) and not re.search(r"\bgqa\b|group", said):
            return 1
        if re.search(r"\bgqa\b|grouped[- ]query|\bgroups?\b", said):
            raise Unsupported(f"kv_heads: {reading.words!r} says grouped-query attention without its number of KV "
                              "heads (a number: '8', '8 (GQA)', 'num_key_value_heads: 8')")
    return reading.value


def qualified_readings(row: dict[str, str], keys: tuple[str, ...]) -> list[str]:
    """The numbers read from words around them ("ep=64 from '64 (spanning 8 nodes)'"), for the assumptions."""
    out = []
    for key in keys:
        try:
            r = read_int(row, key)
        except BadValueError:
            continue
        if r.how == "qualified":
            out.append(f"{key}={r.value} read from {r.words!r}")
    return out
