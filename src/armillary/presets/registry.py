"""Find presets by name: a preset's name is its file name without extension, case-insensitive."""

from __future__ import annotations

import functools
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

KINDS = ("models", "devices", "systems", "stacks")


def preset_dir(kind: str) -> Path:
    return Path(str(resources.files("armillary.presets") / kind))


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in preset_dir(kind).iterdir() if p.suffix in (".yaml", ".yml", ".json"))


def read_data_file(path: Path) -> Any:
    """Read a YAML or JSON file."""
    with path.open() as f:
        return yaml.safe_load(f)  # YAML is a superset of JSON


@functools.cache
def _index(kind: str) -> dict[str, Path]:
    return {p.stem.lower(): p for p in preset_dir(kind).iterdir() if p.suffix in (".yaml", ".yml", ".json")}


def find_preset(kind: str, name: str) -> Path | None:
    return _index(kind).get(name.lower())
