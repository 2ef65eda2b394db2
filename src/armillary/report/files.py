"""Tables of results saved to a file whose suffix picks the format: .csv, .json or .parquet."""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from armillary.errors import MissingExtra, SpecError
from armillary.writing import replaced

FORMATS = (".csv", ".json", ".parquet")


def _flat(value: Any) -> Any:
    """A cell: nested values (dicts, tuples) become JSON text; numbers and strings stay as they are."""
    return json.dumps(value) if isinstance(value, Mapping | list | tuple) else value


def save_rows(rows: Sequence[Mapping[str, Any]], path: Path) -> None:
    """Rows (one dict each, the same keys) as CSV, JSON (a list of objects) or Parquet (needs pyarrow:
    pip install 'armillary[parquet]')."""
    suffix = path.suffix.lower()
    if suffix not in FORMATS:
        raise SpecError(f"{path}: the file name must end in one of {', '.join(FORMATS)}")
    names = list(rows[0]) if rows else []
    if suffix == ".parquet":
        try:
            import pyarrow as pa
            import pyarrow.parquet as pq
        except ImportError:  # pragma: no cover - depends on the installation
            raise MissingExtra("Parquet output", "parquet", "pyarrow") from None
    with replaced(path) as temporary:
        if suffix == ".json":
            temporary.write_text(json.dumps(list(rows), indent=2) + "\n")
        elif suffix == ".csv":
            with temporary.open("w", newline="") as f:
                out = csv.writer(f)
                out.writerow(names)
                out.writerows([_flat(r[n]) for n in names] for r in rows)
        else:
            pq.write_table(pa.table({n: [_flat(r[n]) for r in rows] for n in names}), temporary)
