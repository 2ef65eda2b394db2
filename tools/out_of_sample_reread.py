"""Run a batch's model on its rows as the harness reads them now (validation/data/out_of_sample_reread.csv).

The first untouched run of a batch (tools/out_of_sample.py) mixes the model's error with the harness misreading
rows. This re-runs the model of the batch commit, which had not seen the rows, on the configurations the current
harness reads (model, system description, strategy, workload), with the batch commit's own device curves: the
error a user who built the inputs by hand would have met. Training rows only (their estimate's interface has
not changed); rows the batch model cannot describe (e.g. LoRA before it existed) are left out.
    python tools/out_of_sample_reread.py --batch 2026-12-06
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from armillary.validation.metrics import read_metric
from armillary.validation.out_of_sample import Reread, read_out_of_sample, read_reread, write_reread
from armillary.validation.row_columns import Unsupported
from armillary.validation.rows import row_specs
from armillary.validation.run import choose_candidate, read_rows

# runs inside the batch commit's tree: its specs, device presets and estimator
_BATCH_MODEL = """
import json, pathlib, sys, yaml
from armillary.specs.model import Model
from armillary.specs.system import System
from armillary.specs.strategy import Strategy
from armillary.specs.workload import Training
from armillary.specs.loading import load_device
from armillary.estimate.run import estimate_training_run
devices = {yaml.safe_load(p.read_text())["name"]: p.stem
           for p in pathlib.Path(sys.argv[3], "src/armillary/presets/devices").glob("*.yaml")}
with open(sys.argv[1]) as configs, open(sys.argv[2], "w") as out:
    for line in configs:
        d = json.loads(line)
        try:
            if d["device"] in devices:
                device = load_device(devices[d["device"]])
                d["system"]["device"] = device.model_dump(mode="json", exclude_defaults=True)
            r = estimate_training_run(Model.model_validate(d["model"]), System.model_validate(d["system"]),
                                      Strategy.model_validate(d["strategy"]), Training.model_validate(d["workload"]))
        except Exception as err:
            out.write(json.dumps({"id": d["id"], "refused": str(err)[:200]}) + "\\n")
            continue
        out.write(json.dumps({"id": d["id"], "step_time_s": float(r.step_time_s), "total_s": float(r.layer.total_s),
                              "hfu": float(r.hfu), "mfu": float(r.mfu), "hardware_flop": float(r.hardware_flop),
                              "model_flop": float(r.model_flop), "tokens_per_s": float(r.tokens_per_s)}) + "\\n")
"""


def _git(*args: str) -> str:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", required=True, help="the batch date, as recorded in out_of_sample.csv")
    args = parser.parse_args()
    records = [r for r in read_out_of_sample() if r.batch == args.batch and r.kind == "training"]
    if not records:
        sys.exit(f"no training rows of batch {args.batch} in out_of_sample.csv")
    model_commit, reading_commit = records[0].commit, _git("rev-parse", "--short=12", "HEAD")
    rows = {r["id"]: r for r in read_rows()}
    chosen = {}
    with tempfile.TemporaryDirectory() as tmp:
        configs, results, tree = Path(tmp, "configs.jsonl"), Path(tmp, "results.jsonl"), Path(tmp, "tree")
        with configs.open("w") as f:
            for r in records:
                try:
                    _, spec = choose_candidate(row_specs(rows[r.id]))
                except (KeyError, Unsupported, ValueError):
                    continue
                chosen[r.id] = spec
                dump = {k: getattr(spec, k).model_dump(mode="json", exclude_defaults=True)
                        for k in ("model", "system", "strategy", "workload")}
                f.write(json.dumps({"id": r.id, "device": spec.system.device.name, **dump}) + "\n")
        _git("worktree", "add", "--detach", str(tree), model_commit)
        try:
            subprocess.run([sys.executable, "-c", _BATCH_MODEL, str(configs), str(results), str(tree)],
                           check=True, env={"PYTHONPATH": str(tree / "src"), "PATH": "/usr/bin:/bin"})
            outcomes = [json.loads(line) for line in results.read_text().splitlines()]
        finally:
            _git("worktree", "remove", "--force", str(tree))
    reread = [r for r in read_reread() if r.batch != args.batch]
    for o in outcomes:
        if "refused" in o:
            print(f"{o['id']}: the batch model cannot describe it ({o['refused'][:120]})")
            continue
        result = types.SimpleNamespace(layer=types.SimpleNamespace(total_s=o.pop("total_s")), **o)
        row = rows[o["id"]]
        predicted = read_metric(row).read(result, chosen[o["id"]])  # type: ignore[arg-type]
        reread.append(Reread(args.batch, model_commit, reading_commit, o["id"], predicted,
                             predicted / float(row["value"]) - 1))
    write_reread(reread)
    print(f"{sum(r.batch == args.batch for r in reread)} rows of batch {args.batch} re-read")


if __name__ == "__main__":
    main()
