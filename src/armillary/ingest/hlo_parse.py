"""Parse XLA HLO text (`jax.jit(f).lower(...).compile().as_text()`, XLA's `--xla_dump_to` files) without XLA.

A module holds computations; a computation holds instructions in program order (the schedule, for a
scheduled module); an instruction is `[ROOT] %name = SHAPE opcode(operands), attribute=value, ...`.
Both printer styles are read: operands as `%name` or with their shapes (`f32[8]{0} %name`), and names
with or without `%`. Reference: XLA's HLO text syntax (openxla.org/xla/operation_semantics and
xla/hlo/parser/hlo_parser.cc, read for the grammar only).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from armillary.errors import SpecError
from armillary.ingest.hlo_shapes import Shape, parse_shape
from armillary.simulate.engine import paused_gc
from armillary.specs.loading import MAX_DEVICES

_HEADER = re.compile(r"^(ENTRY\s+)?%?([^\s(]+)\s*(\(.*\))?\s*(->\s*.*)?\{\s*$")
_INSTRUCTION = re.compile(r"^\s+(ROOT\s+)?%?([^\s=]+)\s*=\s*")
_OPCODE = re.compile(r" *([a-z][\w-]*)\(")
_SHAPE_TOKEN = re.compile(r"(?:[a-z][a-z0-9]*\[[^\]]*\](?:\{[^}]*\})?|/\*.*?\*/)")
_NAME = re.compile(r"%?([A-Za-z_][\w.\-]*)")
_PARENS = re.compile(r"[()]")
_NO_OPERAND_NAMES = frozenset({"parameter", "constant", "iota", "partition-id", "replica-id",
                               "rng-get-and-update-state"})


class Instruction(NamedTuple):
    """One HLO instruction: its result shape, operand names and the unparsed attribute text."""

    name: str
    opcode: str
    shape: Shape
    operands: tuple[str, ...]
    attributes: str  # `, key=value, ...` after the operands (parsed on demand: `hlo_attrs.py`)
    root: bool = False
    argument: str = ""  # the text inside the parentheses of parameter / constant (e.g. the parameter number)


@dataclass(frozen=True)
class Computation:
    name: str
    instructions: tuple[Instruction, ...]
    entry: bool = False
    by_name: dict[str, Instruction] = field(default_factory=dict, compare=False, repr=False)
    opcodes: frozenset[str] = frozenset()

    @property
    def root(self) -> Instruction:
        for inst in reversed(self.instructions):
            if inst.root:
                return inst
        return self.instructions[-1]


@dataclass(frozen=True)
class HloModule:
    name: str
    computations: dict[str, Computation]
    entry: str
    num_partitions: int = 1
    replica_count: int = 1

    @property
    def entry_computation(self) -> Computation:
        return self.computations[self.entry]

    @property
    def instruction_count(self) -> int:
        return sum(len(c.instructions) for c in self.computations.values())


MAX_HLO_BYTES = 2**30  # an HLO text module: the largest compiled models print tens of MB


def read_hlo(path: Path | str) -> HloModule:
    """The module in the HLO text file at `path`."""
    p = Path(path)
    try:
        if p.stat().st_size > MAX_HLO_BYTES:
            raise SpecError(f"--hlo {p}: larger than {MAX_HLO_BYTES // 2**20:,} MiB")
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecError(f"--hlo {p}: cannot read the file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        raise SpecError(f"--hlo {p}: not UTF-8 text (byte {exc.start})") from None
    return parse_hlo(text, source=str(p))


def parse_hlo(text: str, source: str = "HLO text") -> HloModule:
    """Parse one HLO module printed as text."""
    with paused_gc():  # a node per instruction: collections would rescan them all
        return _parse(text, source)


def _parse(text: str, source: str) -> HloModule:
    name, partitions, replicas = "module", 1, 1
    computations: dict[str, Computation] = {}
    entry = ""
    current: str | None = None
    is_entry = False
    body: list[Instruction] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if current is not None:
            if line.startswith("}"):
                computations[current] = Computation(current, tuple(body), is_entry, {i.name: i for i in body},
                                                    frozenset(i.opcode for i in body))
                if is_entry:
                    entry = current
                current, body = None, []
            elif " = " in line and not line.lstrip(" ").startswith("//"):
                body.append(_instruction(line, number, source))
            elif line.strip() and not line.lstrip().startswith("//"):
                raise SpecError(f"{source}:{number}: not an HLO instruction (expected '%name = shape "
                                f"opcode(...)'): {line.strip()[:120]!r}")
            continue
        if line.startswith("HloModule"):
            name, partitions, replicas = _module_header(line)
            if not (min(partitions, replicas) >= 1 and partitions * replicas <= MAX_DEVICES):
                raise SpecError(f"{source}:{number}: num_partitions = {partitions} x replica_count = {replicas}: "
                                f"expected 1 to {MAX_DEVICES:,} devices")
            continue
        if line and not line[0].isspace() and line.rstrip().endswith("{") and "=" not in line.split("(")[0]:
            header = _HEADER.match(line)
            if header:
                current, is_entry = header.group(2), bool(header.group(1))
    if current is not None:
        raise SpecError(f"{source}: computation {current!r} is not closed with '}}'")
    if not computations:
        raise SpecError(f"{source}: no HLO computations found (expected 'ENTRY %main ... {{' blocks)")
    if not entry:
        entry = next(reversed(computations))  # XLA prints the entry computation last
    return HloModule(name, computations, entry, partitions, replicas)


def _module_header(line: str) -> tuple[str, int, int]:
    name = line.split()[1].rstrip(",") if len(line.split()) > 1 else "module"
    partitions = re.search(r"num_partitions=(\d{1,12})\b", line)
    replicas = re.search(r"replica_count=(\d{1,12})\b", line)
    return name, int(partitions.group(1)) if partitions else 1, int(replicas.group(1)) if replicas else 1


def _instruction(line: str, number: int, source: str) -> Instruction:
    head = _INSTRUCTION.match(line)
    if head is None:
        raise SpecError(f"{source}:{number}: not an HLO instruction (expected '%name = shape opcode(...)'): "
                        f"{line.strip()[:120]!r}")
    pos = head.end()
    if line.startswith("(", pos):  # tuple shape: up to its matching parenthesis
        shape_end = _closing(line, pos, number, source) + 1
    else:
        space = line.find(" ", pos)
        shape_end = space if space >= 0 else len(line)
    shape_text = line[pos:shape_end]
    opcode_match = _OPCODE.match(line, shape_end)
    if opcode_match is None:
        raise SpecError(f"{source}:{number}: no opcode after the shape in {line.strip()[:120]!r}")
    opcode = opcode_match.group(1)
    open_at = opcode_match.end() - 1
    close_at = _closing(line, open_at, number, source)
    inside = line[open_at + 1:close_at]
    if opcode in _NO_OPERAND_NAMES:
        operands: tuple[str, ...] = ()
    else:
        bare = inside if "[" not in inside and "/*" not in inside else _SHAPE_TOKEN.sub("", inside)
        operands = tuple(_NAME.findall(bare.replace("(", " ").replace(")", " ") if "(" in bare else bare))
    return Instruction(head.group(2), opcode, parse_shape(shape_text), operands, line[close_at + 1:],
                       bool(head.group(1)), inside if opcode in _NO_OPERAND_NAMES else "")


def _closing(line: str, open_at: int, number: int, source: str) -> int:
    """Index of the parenthesis closing the one at `open_at`."""
    close = line.find(")", open_at)
    if close >= 0 and line.find("(", open_at + 1, close) < 0:  # no nested parenthesis: the common case
        return close
    depth = 0
    for match in _PARENS.finditer(line, open_at):
        depth += 1 if match.group(0) == "(" else -1
        if depth == 0:
            return match.start()
    raise SpecError(f"{source}:{number}: unbalanced parentheses in {line.strip()[:120]!r}")
