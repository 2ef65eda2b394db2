"""What the stacks' own issue trackers say about published rows (`data/stack_regressions.csv`).

A published figure can be a run its maintainers call a regression: slower than the same stack ran before, for a
reason they have or have not diagnosed. Such a row stays in every figure (no factor is fitted to it); the
harness carries the tracker's words beside the row's result (`RowResult.caveat`), and the accuracy tables give
each source group's figure also without the rows of an acknowledged regression (`tools/accuracy_tables.py`).

Each line of the file is one row and one tracker entry:

- `kind`: `acknowledged_regression` (the maintainers say this run is a regression; the row is set aside in
  the second figure) or `note` (a tracker entry about the row's configuration that is not a regression, such
  as a later, faster recipe or a reproduction that ran slower; carried, never set aside);
- `tracker`: the issue or pull request, as a GitHub URL;
- `words`: its title and the words that say so, quoted;
- `diagnosis`: the mechanism the tracker names, and whether it is sized ("none stated" where it names none);
- `status`: open / merged, when, and what later releases measured.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

from armillary.errors import SpecError

DEFAULT_FILE = Path(str(resources.files("armillary.validation") / "data" / "stack_regressions.csv"))
KINDS = ("acknowledged_regression", "note")
COLUMNS = ("id", "kind", "tracker", "words", "diagnosis", "status")


@dataclass(frozen=True)
class TrackerEntry:
    """One tracker entry about one published row."""

    id: str
    kind: str  # one of KINDS
    tracker: str  # https://github.com/OWNER/REPO/issues/N or /pull/N
    words: str
    diagnosis: str
    status: str

    @property
    def sets_aside(self) -> bool:
        """Whether the row leaves the "without acknowledged stack regressions" figure."""
        return self.kind == "acknowledged_regression"

    def caveat(self) -> str:
        label = "acknowledged stack regression" if self.sets_aside else "tracker note"
        return f"{label} ({self.tracker}): {self.words} Diagnosis: {self.diagnosis}. Status: {self.status}."


def _entry(line: int, raw: dict[str, str | None], path: Path) -> TrackerEntry:
    values = {c: (raw.get(c) or "").strip() for c in COLUMNS}
    for column in COLUMNS:
        if not values[column]:
            raise SpecError(f"{path.name} line {line}: {column}: empty (every entry states its {column})")
    if values["kind"] not in KINDS:
        raise SpecError(f"{path.name} line {line}: kind: expected one of {', '.join(KINDS)}, "
                        f"got {values['kind']!r}")
    if not values["tracker"].startswith("https://github.com/") or not any(
            f"/{part}/" in values["tracker"] for part in ("issues", "pull")):
        raise SpecError(f"{path.name} line {line}: tracker: expected a GitHub issue or pull request URL, "
                        f"got {values['tracker']!r}")
    return TrackerEntry(**values)


def read_entries(path: Path | str = DEFAULT_FILE) -> tuple[TrackerEntry, ...]:
    """Every entry of a tracker file, checked field by field."""
    path = Path(path)
    if not path.is_file():
        raise SpecError(f"tracker file {str(path)!r}: no such file")
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or ())]
        if missing:
            raise SpecError(f"{path.name}: columns {', '.join(missing)} missing (expected {', '.join(COLUMNS)})")
        entries = tuple(_entry(i, raw, path) for i, raw in enumerate(reader, start=2))
    seen: set[tuple[str, str]] = set()
    for e in entries:
        if (e.id, e.tracker) in seen:
            raise SpecError(f"{path.name}: id: {e.id} is listed twice for {e.tracker}")
        seen.add((e.id, e.tracker))
    return entries


@cache
def shipped_entries() -> dict[str, tuple[TrackerEntry, ...]]:
    """The shipped file's entries by row id."""
    out: dict[str, tuple[TrackerEntry, ...]] = {}
    for e in read_entries():
        out[e.id] = (*out.get(e.id, ()), e)
    return out


def caveat_of(row_id: str) -> str | None:
    """The tracker entries about a shipped row, as one text (None: none)."""
    entries = shipped_entries().get(row_id, ())
    return " | ".join(e.caveat() for e in entries) or None


def acknowledged_regressions() -> frozenset[str]:
    """Ids of the shipped rows whose maintainers call the published run a regression."""
    return frozenset(i for i, es in shipped_entries().items() if any(e.sets_aside for e in es))
