"""The first untouched run of each new batch of measured rows: the only honest out-of-sample record.

When rows arrive, they are run once at the current commit before anything is tuned on them, and the result
(prediction, error, the error band the estimate printed then, whether it covered the measurement) is kept in
`validation/data/out_of_sample.csv` with the batch date and the commit. Later model changes never rewrite
an earlier batch: the file is how far the model's claims held on rows it had not seen.

An untouched error mixes two things: the model's error and the harness misreading words it had not met. A
user who builds the inputs by hand meets only the first. `out_of_sample_reread.csv` keeps, per row, the
batch commit's model run on the configuration as a later harness reads the row (`tools/out_of_sample_reread.py`):
still a model that had not seen the row, on inputs read right. `honest_errors` prefers it.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from armillary.validation.run import run_row
from armillary.writing import replaced

OUT_OF_SAMPLE = Path(str(resources.files("armillary.validation") / "data" / "out_of_sample.csv"))
REREAD = Path(str(resources.files("armillary.validation") / "data" / "out_of_sample_reread.csv"))


@dataclass(frozen=True)
class OutOfSample:
    batch: str  # the date the rows arrived, e.g. 2026-12-06
    commit: str  # the commit that ran them untouched
    id: str
    kind: str
    group: str
    measured: float
    predicted: float | None
    error: float | None  # predicted / measured - 1
    band: float | None  # the band the estimate printed (None: none printed, as for collectives then)
    regime: str
    covered: bool | None  # |error| <= band
    skipped: str | None


def run_untouched(rows: Iterable[dict[str, str]], batch: str, commit: str) -> list[OutOfSample]:
    """Every row as the harness runs it now, with the band the estimate carries now."""
    from armillary.validation.coverage import row_band  # the collective bands read this module's records

    out = []
    for row in rows:
        result = run_row(row)
        band = row_band(row) if result.error is not None else None
        covered = None if band is None or result.error is None else abs(result.error) <= band.relative
        out.append(OutOfSample(batch, commit, result.id, row.get("kind", ""), result.group, result.measured,
                               result.predicted, result.error, band.relative if band else None,
                               band.regime if band else "", covered, result.skipped))
    return out


def read_out_of_sample(path: Path = OUT_OF_SAMPLE) -> list[OutOfSample]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return [_parse(r) for r in csv.DictReader(f)]


def _parse(r: dict[str, str]) -> OutOfSample:
    def number(key: str) -> float | None:
        return float(r[key]) if r[key] else None

    return OutOfSample(r["batch"], r["commit"], r["id"], r["kind"], r["group"], float(r["measured"]),
                       number("predicted"), number("error"), number("band"), r["regime"],
                       None if r["covered"] == "" else r["covered"] == "True", r["skipped"] or None)


def append_batch(records: Sequence[OutOfSample], path: Path = OUT_OF_SAMPLE) -> None:
    """Add a batch; a row already recorded keeps its first record (an out-of-sample run happens once)."""
    earlier = read_out_of_sample(path)
    seen = {r.id for r in earlier}
    names = [f.name for f in fields(OutOfSample)]
    with replaced(path) as temporary, temporary.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(names)
        for r in (*earlier, *(r for r in records if r.id not in seen)):
            out.writerow([_cell(getattr(r, n)) for n in names])


def _cell(value: object) -> object:
    return "" if value is None else round(value, 6) if isinstance(value, float) else value


@dataclass(frozen=True)
class Reread:
    batch: str
    model_commit: str  # the batch commit: the model that had not seen the row
    reading_commit: str  # the harness that read the row
    id: str
    predicted: float
    error: float  # predicted / measured - 1


def read_reread(path: Path = REREAD) -> list[Reread]:
    if not path.is_file():
        return []
    with path.open(newline="", encoding="utf-8") as f:
        return [Reread(r["batch"], r["model_commit"], r["reading_commit"], r["id"], float(r["predicted"]),
                       float(r["error"])) for r in csv.DictReader(f)]


def write_reread(records: Sequence[Reread], path: Path = REREAD) -> None:
    names = [f.name for f in fields(Reread)]
    with replaced(path) as temporary, temporary.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(names)
        for r in records:
            out.writerow([_cell(getattr(r, n)) for n in names])


def honest_errors(kinds: tuple[str, ...] = ("training", "inference"), path: Path = OUT_OF_SAMPLE,
                  reread_path: Path = REREAD) -> dict[str, float]:
    """Per row of `kinds` first run out of sample: the batch model's error on the row as read now. Where a
    batch's rows of a kind were re-read, only re-read rows count (a row the batch model could not describe has
    no model error: it was a refusal); elsewhere the untouched error."""
    records = [r for r in read_out_of_sample(path) if r.kind in kinds]
    kind_of = {r.id: (r.batch, r.kind) for r in records}
    reread = [r for r in read_reread(reread_path) if r.id in kind_of]
    reread_kinds = {kind_of[r.id] for r in reread}
    errors = {r.id: r.error for r in records if r.error is not None and (r.batch, r.kind) not in reread_kinds}
    errors.update({r.id: r.error for r in reread})
    return errors
