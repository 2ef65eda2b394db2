"""A launch command and what it cannot express: the framework targets, commands with their arguments, the
files they read and the notes beside them (`report.deploy` builds them)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from enum import StrEnum


class Target(StrEnum):
    MEGATRON = "megatron"  # Megatron-LM pretrain_gpt.py / NeMo (Megatron-Core) arguments
    VLLM = "vllm"  # vllm serve
    TRTLLM = "trtllm"  # trtllm-serve serve (+ trtllm-build for a TensorRT engine)


@dataclass(frozen=True)
class Command:
    argv: tuple[str, ...]

    def shell(self) -> str:
        """The program and its positional arguments, then one option (with its value) per line, continued
        with backslashes."""
        first = next((i for i, a in enumerate(self.argv) if a.startswith("--")), len(self.argv))
        lines: list[str] = [shlex.join(self.argv[:first])]
        rest = list(self.argv[first:])
        while rest:
            item = [rest.pop(0)]
            if rest and not rest[0].startswith("--"):
                item.append(rest.pop(0))
            lines.append("  " + shlex.join(item))
        return " \\\n".join(lines)


@dataclass(frozen=True)
class Deployment:
    target: Target
    commands: tuple[Command, ...]
    files: tuple[tuple[str, str], ...] = ()  # (file name, contents) the commands read
    notes: tuple[str, ...] = ()  # what the arguments cannot express

    def text(self) -> str:
        """A shell snippet: notes as comments, files as here-documents, then the commands."""
        parts = [f"# {n}" for n in self.notes]
        parts += [f"cat > {name} <<'EOF'\n{body}EOF" for name, body in self.files]
        parts += [c.shell() for c in self.commands]
        return "\n".join(parts) + "\n"
