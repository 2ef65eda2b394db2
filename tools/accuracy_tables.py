"""The accuracy tables of README.md and docs/validation.md, generated from `armillary validate --csv`.

One table per domain (training, inference, serving, collectives; memory in docs/validation.md only): a row
per source group with the rows run,
the mean, median and largest |predicted / measured - 1|, and a last row over the whole domain. The README
holds the domains' largest groups (the rest summed up as "other sources"), docs/validation.md every group.
The tables sit between markers (`<!-- accuracy:DOMAIN:start -->` ... `<!-- accuracy:DOMAIN:end -->`) and are
replaced in place; everything else in the files is left alone.

Rows whose published run the stack's own maintainers call a regression (`validation/data/stack_regressions.csv`,
kind `acknowledged_regression`) stay in every table above. A page that holds `<!-- accuracy:regressions:start
-->` ... `<!-- accuracy:regressions:end -->` gets one more table: each source group with such rows, its figure
over all rows (the headline) beside its figure without them, and the same over each domain.

Regenerate after a model change (validate takes a minute or two):

    armillary validate --csv /tmp/validate.csv && python tools/accuracy_tables.py /tmp/validate.csv

or `python tools/accuracy_tables.py` to run the validation itself. `--check` writes nothing and exits 1 when a
file would change.
"""

from __future__ import annotations

import argparse
import csv
import re
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MEASUREMENTS = ROOT / "src" / "armillary" / "validation" / "data" / "measurements.csv"
DOMAINS = ("training", "inference", "serving", "collectives", "memory")
README_DOMAINS = DOMAINS[:4]  # the README's front page leaves the memory rows to docs/validation.md
TITLES = {"training": "Training (step time, throughput, MFU)",
          "inference": "Inference (static batch: throughput, time to first token)",
          "serving": "Serving (engine benchmarks under load)",
          "collectives": "Collectives (nccl-tests bus bandwidth; `<1MiB`: messages under 1 MiB)",
          "memory": "Memory (peak allocated or reserved per GPU)"}
README_GROUPS = 5  # the README's tables: the largest groups of each domain, the rest summed up
HEADER = ("| source group | rows run | mean abs. error | median | max |\n"
          "| --- | ---: | ---: | ---: | ---: |")


def domain_of(row_id: str, measurement: dict[str, str] | None) -> str:
    """The domain of a result row: its id prefix, and for inference rows whether a server ran under load."""
    if row_id.startswith("TR-"):
        return "training"
    if row_id.startswith("CO-"):
        return "collectives"
    if row_id.startswith("MEM-"):
        return "memory"
    if row_id.startswith("SRV-"):
        return "serving"
    if measurement is not None:
        from armillary.validation.run import is_serving_row

        return "serving" if is_serving_row(measurement) else "inference"
    return "inference"


def read_rows(path: Path) -> dict[str, dict[str, list[tuple[str, float | None]]]]:
    """domain -> source group -> (id, |error|) of each row (None: not run)."""
    with MEASUREMENTS.open(newline="", encoding="utf-8") as f:
        measurements = {r["id"]: r for r in csv.DictReader(f)}
    out: dict[str, dict[str, list[tuple[str, float | None]]]] = {d: {} for d in DOMAINS}
    with path.open(newline="", encoding="utf-8") as f:
        for r in csv.DictReader(f):
            error = abs(float(r["error"])) if r.get("error") not in (None, "", "None") else None
            domain = domain_of(r["id"], measurements.get(r["id"]))
            out[domain].setdefault(r["group"], []).append((r["id"], error))
    return out


def read_results(path: Path) -> dict[str, dict[str, list[float | None]]]:
    """domain -> source group -> the |error| of each row (None: not run)."""
    return {d: {g: [e for _, e in rows] for g, rows in groups.items()} for d, groups in read_rows(path).items()}


def _line(name: str, errors: list[float | None]) -> str:
    run = [e for e in errors if e is not None]
    if not run:
        return f"| {name} | 0 / {len(errors)} | | | |"
    return (f"| {name} | {len(run)} / {len(errors)} | {100 * statistics.fmean(run):.1f}% | "
            f"{100 * statistics.median(run):.1f}% | {100 * max(run):.1f}% |")


def _groups(n: int) -> str:
    return f"{n} group" if n == 1 else f"{n} groups"


def table(groups: dict[str, list[float | None]], largest: int | None = None) -> str:
    """A domain's table: every group (or the `largest` by rows run, the rest as one line), then the domain."""
    order = sorted(groups, key=lambda g: (-sum(e is not None for e in groups[g]), g))
    shown = order if largest is None else order[:largest]
    lines = [HEADER, *(_line(g, groups[g]) for g in shown)]
    rest = [e for g in order if g not in shown for e in groups[g]]
    if rest:
        lines.append(_line(f"other sources ({_groups(len(order) - len(shown))})", rest))
    lines.append(_line(f"**all** ({_groups(len(order))})", [e for g in order for e in groups[g]]))
    return "\n".join(lines)


REGRESSIONS_HEADER = ("| source group | rows run | mean abs. error, all rows | acknowledged stack regressions "
                      "| rows run without them | mean abs. error without them | median | max |\n"
                      "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")


def _regressions_line(name: str, rows: list[tuple[str, float | None]], set_aside: frozenset[str]) -> str:
    run = [e for _, e in rows if e is not None]
    kept = [e for i, e in rows if e is not None and i not in set_aside]
    aside = sum(i in set_aside for i, _ in rows)
    everything = f"{100 * statistics.fmean(run):.1f}%" if run else ""
    without = (f"{100 * statistics.fmean(kept):.1f}% | {100 * statistics.median(kept):.1f}% | "
               f"{100 * max(kept):.1f}%") if kept else "| |"
    return (f"| {name} | {len(run)} / {len(rows)} | {everything} | {aside} | {len(kept)} / {len(rows) - aside} | "
            f"{without} |")


def regressions_table(rows: dict[str, dict[str, list[tuple[str, float | None]]]], set_aside: frozenset[str]) -> str:
    """Each source group holding a row of an acknowledged stack regression, and each domain holding one: the
    mean |error| over all rows (the headline) beside the figures without those rows (which stay in the tables
    above)."""
    lines = [REGRESSIONS_HEADER]
    for domain in DOMAINS:
        groups = rows.get(domain, {})
        hit = sorted(g for g, rs in groups.items() if any(i in set_aside for i, _ in rs))
        if not hit:
            continue
        lines += [_regressions_line(g, groups[g], set_aside) for g in hit]
        lines.append(_regressions_line(f"**all {domain}** ({_groups(len(groups))})",
                                       [r for g in sorted(groups) for r in groups[g]], set_aside))
    return "\n".join(lines)


def replace_between(text: str, domain: str, body: str) -> str:
    start, end = f"<!-- accuracy:{domain}:start -->", f"<!-- accuracy:{domain}:end -->"
    pattern = re.compile(re.escape(start) + r".*?" + re.escape(end), re.S)
    if not pattern.search(text):
        raise SystemExit(f"no {start} ... {end} markers")
    return pattern.sub(lambda _: f"{start}\n{body}\n{end}", text, count=1)


def render(results: dict[str, dict[str, list[float | None]]], text: str, largest: int | None,
           domains: tuple[str, ...] = DOMAINS) -> str:
    for domain in domains:
        text = replace_between(text, domain, table(results[domain], largest))
    return text


def main(argv: Iterable[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", nargs="?", type=Path, help="output of `armillary validate --csv` (default: run it)")
    parser.add_argument("--check", action="store_true", help="write nothing; exit 1 if a file would change")
    args = parser.parse_args(list(argv) if argv is not None else None)
    path = args.results
    if path is None:
        path = Path(tempfile.mkdtemp()) / "validate.csv"
        subprocess.run([sys.executable, "-m", "armillary.cli", "validate", "--csv", str(path)], check=True,
                       stdout=subprocess.DEVNULL)
    rows = read_rows(path)
    results = read_results(path)
    from armillary.validation.regressions import acknowledged_regressions

    set_aside = acknowledged_regressions()
    stale = []
    for name, largest, domains in (("README.md", README_GROUPS, README_DOMAINS),
                                   ("docs/validation.md", None, DOMAINS)):
        file = ROOT / name
        old = file.read_text()
        new = render(results, old, largest, domains)
        if "<!-- accuracy:regressions:start -->" in new:
            new = replace_between(new, "regressions", regressions_table(rows, set_aside))
        if new != old:
            stale.append(name)
            if not args.check:
                file.write_text(new)
    print(("would change: " if args.check else "updated: ") + (", ".join(stale) or "nothing"))
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
