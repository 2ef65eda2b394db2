"""MLPerf Training's evaluation inside a time to train, as the benchmark's rules set it (`data/mlperf_eval_rules.csv`).

A time to train counts run_start..run_stop, and the evaluations the benchmark runs between them are inside it. The
rules (mlcommons/training_policies training_rules.adoc, "Evaluation frequency", at the round's commit) fix the
interval in sequences trained (CEIL(interval / GBS) steps where GBS does not divide it) and, for some benchmarks, a
number of first evaluations skipped (FLOOR(a * GBS + b)); the reference implementation's README and the submitters'
configs give the evaluation set (sequences and their length). One row per benchmark and round, a source per value.

Only a row that names MLPerf Training, a benchmark and a round is matched: the benchmark from the model, id or
source words ("GPT-3 175B", "llama2_70b_lora", "Llama 3.1 405B"), the round from "MLPerf Training v4.1",
"training_results_v4.1" or an id "TR-MLPERF-v4.1". A row that names MLPerf Training but a benchmark or round the
data does not hold gets a recorded gap, never a silent zero.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path

RULES_CSV = Path(str(resources.files("armillary.validation") / "data" / "mlperf_eval_rules.csv"))

# the benchmark's name in the rules, as rows word it (model column, id, source path)
_BENCHMARKS = (
    ("llama2_70b_lora", r"llama[- _]?2[- _]?70b[- _]?lora|llama[- ]?2 70b\b.*\blora\b|\blora\b.*llama[- ]?2[- ]70b"),
    ("llama31_405b", r"llama[- _]?3\.?1[- _]?405b"),
    ("llama31_8b", r"llama[- _]?3\.?1[- _]?8b\b"),
    ("gpt3", r"\bgpt[- _]?3\b"),
)
_MLPERF_TRAINING = r"mlperf[- _]?training|training_results_v\d|tr-mlperf-v\d|mlcommons/training\b"
_ROUND = r"(?:mlperf[- _]?training|training_results_|tr-mlperf-)[\s_-]*(?:round\s+)?v?(\d+\.\d+)\b"


@dataclass(frozen=True)
class EvalRule:
    """One benchmark's evaluation in one round: every `interval_sequences` trained (CEIL(interval / GBS) steps),
    the first FLOOR(skip_gbs_factor * GBS + skip_constant) skipped, each on `eval_sequences` of `eval_seq_len`
    tokens."""

    benchmark: str
    round: str
    interval_sequences: int
    skip_gbs_factor: float
    skip_constant: float
    eval_sequences: int
    eval_seq_len: int
    timed: str
    interval_source: str
    eval_set_source: str

    def interval_steps(self, global_batch: int) -> int:
        """Steps between evaluations: CEIL(interval / GBS) (training_rules.adoc, "Evaluation frequency")."""
        return math.ceil(self.interval_sequences / global_batch)

    def skipped(self, global_batch: int) -> int:
        """First evaluations the rules skip: FLOOR(a * GBS + b); 0 where the benchmark skips none."""
        return math.floor(self.skip_gbs_factor * global_batch + self.skip_constant + 1e-9)

    def evaluations(self, steps: float, global_batch: int) -> int:
        """Evaluations run in `steps` trained steps: one at the end of each whole interval, less those skipped
        (run_stop follows the evaluation that reaches the target, so a run trains whole intervals)."""
        return max(0, math.floor(steps / self.interval_steps(global_batch) + 1e-6) - self.skipped(global_batch))

    def words(self) -> str:
        skip = "" if not (self.skip_gbs_factor or self.skip_constant) else (
            f", skipping the first FLOOR({self.skip_gbs_factor:g}*GBS+{self.skip_constant:g})")
        return (f"evaluation per MLPerf Training {self.round} rules ({self.benchmark}): every "
                f"{self.interval_sequences} sequences (CEIL({self.interval_sequences}/GBS) steps){skip}, on "
                f"{self.eval_sequences} sequences of {self.eval_seq_len} tokens (forward only); timed "
                f"{self.timed}; source {self.interval_source}; evaluation set {self.eval_set_source}")


@lru_cache(maxsize=4)
def load_rules(path: Path | str = RULES_CSV) -> dict[tuple[str, str], EvalRule]:
    with Path(path).open(newline="") as f:
        return {(r["benchmark"], r["round"]): EvalRule(
            r["benchmark"], r["round"], int(r["interval_sequences"]), float(r["skip_gbs_factor"]),
            float(r["skip_constant"]), int(r["eval_sequences"]), int(r["eval_seq_len"]), r["timed"],
            r["interval_source"], r["eval_set_source"]) for r in csv.DictReader(f)}


def _text(row: dict[str, str]) -> str:
    return " ".join(row.get(k) or "" for k in ("id", "model", "framework", "source", "metric", "notes")).lower()


def names_mlperf_training(row: dict[str, str]) -> bool:
    return re.search(_MLPERF_TRAINING, _text(row)) is not None


def benchmark_of(row: dict[str, str]) -> str | None:
    text = " ".join(row.get(k) or "" for k in ("model", "id", "source")).lower()
    return next((name for name, pattern in _BENCHMARKS if re.search(pattern, text)), None)


def round_of(row: dict[str, str]) -> str | None:
    rounds = {f"v{m}" for m in re.findall(_ROUND, _text(row))}
    return rounds.pop() if len(rounds) == 1 else None


def rule_for_row(row: dict[str, str]) -> tuple[EvalRule | None, str | None]:
    """(the rule, None) for an MLPerf Training row whose benchmark and round the data holds; (None, the gap in
    words) for an MLPerf Training row it does not; (None, None) for any other row."""
    if not names_mlperf_training(row):
        return None, None
    benchmark, rnd = benchmark_of(row), round_of(row)
    rule = load_rules().get((benchmark or "", rnd or ""))
    if rule is not None:
        return rule, None
    held = sorted({f"{b} {r}" for b, r in load_rules()})
    return None, (f"MLPerf Training time to train without a stated evaluation cadence: benchmark "
                  f"{benchmark or 'not recognised'}, round {rnd or 'not stated (or several)'} not in "
                  f"validation/data/mlperf_eval_rules.csv (holds {', '.join(held)}): no evaluation time added")


def stated_steps_disagree(text: str, rule: EvalRule, global_batch: int | None) -> str | None:
    """A cadence the row words in steps ("eval every 20 steps-equivalent") that is not the rule's CEIL(interval /
    GBS) at the row's GBS: recorded, not read."""
    found = re.search(r"eval(?:uation)?s? every\s*(\d+)\s*(?:training )?(?:steps?|iterations?)[\w-]*", text)
    if found is None or global_batch is None:
        return None
    if int(found.group(1)) == rule.interval_steps(global_batch):
        return None
    return (f"the row's words '{found.group(0)}' disagree with the rules' CEIL({rule.interval_sequences}/"
            f"{global_batch}) = {rule.interval_steps(global_batch)} steps at its GBS {global_batch} (the rules, and "
            "the submitters' VAL_CHECK_INTERVAL, are used; the row's words are not read)")
