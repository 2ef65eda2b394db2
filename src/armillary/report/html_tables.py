"""HTML tables of the report: every cell is text made by a formatter of its column (never a Python repr),
escaped once here; a wide table scrolls inside its own box instead of running off the page."""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

Row = Mapping[str, Any]


@dataclass(frozen=True)
class Column:
    """A column: its heading, the text of its cell in a row, its alignment and an explanation (hover)."""

    title: str
    cell: Callable[[Row], str]
    align: Literal["left", "right"] = "right"
    tip: str = ""
    wrap: bool = False  # long text: the cell wraps instead of widening the table


def table(columns: Sequence[Column], rows: Sequence[Row], caption: str = "", empty: str = "nothing to show",
          header: bool = True) -> str:
    """The rows as an HTML table inside a scrolling box (`empty`: what to say when there is no row)."""
    if not rows:
        return f'<p class="empty">{html.escape(empty)}</p>'
    head = "" if not header else "".join(f'<th class="{c.align}"' + (f' title="{html.escape(c.tip)}"' if c.tip else "")
                   + f">{html.escape(c.title)}</th>" for c in columns)
    body = "".join("<tr>" + "".join(f'<td class="{c.align}{" wrap" if c.wrap else ""}">{html.escape(_text(c, r))}</td>'
                                    for c in columns)
                   + "</tr>" for r in rows)
    cap = f"<caption>{html.escape(caption)}</caption>" if caption else ""
    thead = f"<thead><tr>{head}</tr></thead>" if header else ""
    return f'<div class="table-box"><table>{cap}{thead}<tbody>{body}</tbody></table></div>'


def pairs(items: Sequence[tuple[str, str]], caption: str = "") -> str:
    """Name / value lines (what a run assumed) as a two-column table."""
    rows = [{"name": k, "value": v} for k, v in items]
    return table([Column("", lambda r: str(r["name"]), "left"), Column("", lambda r: str(r["value"]), "left")],
                 rows, caption, header=False)


def _text(column: Column, row: Row) -> str:
    text = column.cell(row)
    if not isinstance(text, str):  # a formatter must make text: a repr must never reach the page
        raise TypeError(f"column {column.title!r}: cell formatter returned {type(text).__name__}, not str")
    return text
