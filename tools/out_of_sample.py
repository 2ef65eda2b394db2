"""Record the first untouched run of a new batch of measured rows (validation/data/out_of_sample.csv),
before anything is tuned on them, and print its error and band coverage per kind. Run it on the rows that
arrived, at the commit they arrived on:
    python tools/out_of_sample.py NEW_ROWS.csv --batch 2026-12-06
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
from collections import defaultdict

from armillary.validation.out_of_sample import OutOfSample, append_batch, run_untouched
from armillary.validation.run import read_rows


def summary(records: list[OutOfSample]) -> list[str]:
    """Per kind: rows, rows run, mean and median |error|, band coverage of the rows that had a band."""
    kinds: dict[str, list[OutOfSample]] = defaultdict(list)
    for r in records:
        kinds[r.kind].append(r)
    lines = []
    for kind, rs in sorted(kinds.items()):
        errors = [abs(r.error) for r in rs if r.error is not None]
        banded = [r for r in rs if r.covered is not None]
        mean = f"{statistics.mean(errors):.1%}" if errors else "-"
        median = f"{statistics.median(errors):.1%}" if errors else "-"
        covered = sum(bool(r.covered) for r in banded)
        lines.append(f"{kind}: {len(rs)} rows, {len(errors)} run, mean |error| {mean}, median {median}; "
                     f"band covers {covered} of {len(errors)} run ({len(banded)} had a band)")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("csv")
    parser.add_argument("--batch", required=True, help="the date the rows arrived (YYYY-MM-DD)")
    args = parser.parse_args()
    commit = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True,
                            check=True).stdout.strip()
    records = run_untouched(read_rows(args.csv), args.batch, commit)
    append_batch(records)
    print("\n".join(summary(records)))


if __name__ == "__main__":
    main()
