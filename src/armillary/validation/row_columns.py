"""The columns of a measured training row read as numbers, and the refusal of a row that cannot be run yet."""

from __future__ import annotations

from armillary.validation.reading import BadValueError, read_int


class Unsupported(Exception):  # noqa: N818 - a reason, not a failure
    """The row cannot be run yet; the message says why."""


SHAPE = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab")  # a model's shape columns


def int_column(row: dict[str, str], key: str) -> int | None:
    """An integer column of a row (`reading.read_int`): a number, or a number with its qualifier; None when
    empty or not led by a number. A column holding several values is refused naming the column."""
    try:
        return read_int(row, key).value
    except BadValueError as err:
        raise Unsupported(str(err)) from None


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
