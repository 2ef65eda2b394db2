"""Speed of the HLO import: a module of at least 100,000 instructions parsed and costed.

Run: python benchmarks/bench_ingest.py   (target: < 2 s for parse + cost)

The module is the compiled JAX GPT step of tests/data/hlo (TP over 8 devices) repeated: its entry
computation copied under new names until the module holds 100,000 instructions, a new entry calling every
copy in turn, so that every instruction is costed.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

from armillary.ingest.hlo_cost import cost_module
from armillary.ingest.hlo_parse import parse_hlo
from armillary.specs.loading import load_system

FIXTURE = Path(__file__).parent.parent / "tests" / "data" / "hlo" / "gpt_small_tp.hlo.txt"


def big_module(target: int = 100_000) -> str:
    """The fixture's step repeated: all its computations copied under new names until the module holds
    `target` instructions (each copy's entry becomes a called computation), a new entry calling every copy
    in turn."""
    text = FIXTURE.read_text()
    start = text.index("\n%")  # every computation (fused ones included) is copied: each fusion its own
    first = text[start:].index("\nENTRY ") + start
    head, others = text[:start], text[start:first]
    start = first
    end = text.index("\n}\n", start) + 3
    entry = text[start + 1:end]
    body = others + "\n" + entry.replace("ENTRY ", "", 1)
    params = [line for line in entry.splitlines() if " parameter(" in line]
    root = next(line for line in entry.splitlines() if "ROOT " in line)
    root_shape = root.split(" = ", 1)[1].rsplit(" tuple(", 1)[0]
    args = ", ".join(line.split(" = ")[0].strip() for line in params)
    copies, calls = [], []
    for k in range(target // text.count(" = ") + 1):
        copies.append(re.sub(r"%([\w.\-]+)", lambda m, k=k: f"%{m.group(1)}__{k}", body))
        name = entry.split()[1].lstrip("%")
        calls.append(f"  %call.{k} = {root_shape} call({args}), to_apply=%{name}__{k}")
    calls[-1] = calls[-1].replace("  %call", "  ROOT %call", 1)
    signature = entry.split("(", 1)[1].split("{\n", 1)[0]
    new_entry = "ENTRY %bench (" + signature + "{\n" + "\n".join(params + calls) + "\n}\n"
    return head + "\n".join(copies) + "\n" + new_entry


def main() -> None:
    text = big_module()
    system = load_system("dgx-h100", 8)
    t0 = time.perf_counter()
    module = parse_hlo(text)
    t1 = time.perf_counter()
    cost = cost_module(module, system)
    t2 = time.perf_counter()
    print(f"{module.instruction_count:,} instructions ({len(text) / 1e6:.1f} MB): parse {t1 - t0:.2f} s, "
          f"cost {t2 - t1:.2f} s, total {t2 - t0:.2f} s (target < 2 s); {len(cost.costs)} executed computations")


if __name__ == "__main__":
    main()
