"""Find presets by name: a preset's name is its file name without extension, case-insensitive."""

from __future__ import annotations

import difflib
import functools
import json
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

KINDS = ("models", "devices", "systems", "stacks", "engines")


def preset_dir(kind: str) -> Path:
    return Path(str(resources.files("armillary.presets") / kind))


def preset_names(kind: str) -> list[str]:
    return sorted(p.stem for p in preset_dir(kind).iterdir() if p.suffix in (".yaml", ".yml", ".json"))


MAX_FILE_BYTES = 32 * 2**20  # a spec, a run file or a Hugging Face config.json is far smaller
MAX_VALUES = 1_000_000  # values a document may expand to through its aliases


class _BoundedLoader(yaml.SafeLoader):
    """Safe YAML that refuses a document whose aliases expand it beyond MAX_VALUES values (a "billion
    laughs" file is a few hundred bytes that expand to billions)."""

    def compose_document(self) -> Any:
        node = super().compose_document()
        if _expanded(node, {}, MAX_VALUES) > MAX_VALUES:
            raise yaml.YAMLError(f"the document expands to more than {MAX_VALUES:,} values through its aliases")
        return node


def _expanded(node: yaml.Node, sizes: dict[int, int], limit: int) -> int:
    """How many values `node` stands for once its aliases are expanded (stops counting past `limit`)."""
    if id(node) in sizes:
        return sizes[id(node)]
    total = 1
    if isinstance(node, yaml.SequenceNode | yaml.MappingNode):
        children = node.value if isinstance(node, yaml.SequenceNode) else [n for pair in node.value for n in pair]
        for child in children:
            total += _expanded(child, sizes, limit)
            if total > limit:
                break
    sizes[id(node)] = total
    return total


def read_data_file(path: Path) -> Any:
    """Read a JSON file (its numbers as JSON reads them: 1e-05 is a number) or a YAML file safely: no
    Python objects, bounded size."""
    if path.stat().st_size > MAX_FILE_BYTES:
        raise yaml.YAMLError(f"the file is larger than {MAX_FILE_BYTES // 2**20} MiB")
    with path.open(encoding="utf-8") as f:
        if path.suffix.lower() == ".json":
            return json.load(f)
        return yaml.load(f, Loader=_BoundedLoader)  # a SafeLoader, with limits


@functools.cache
def _index(kind: str) -> dict[str, Path]:
    return {p.stem.lower(): p for p in preset_dir(kind).iterdir() if p.suffix in (".yaml", ".yml", ".json")}


def find_preset(kind: str, name: str) -> Path | None:
    return _index(kind).get(name.lower())


def _key(name: str) -> str:
    """A name without case, separators or dots: "Llama-3.1_70B" and "llama3.1-70b" share a key."""
    return re.sub(r"[^a-z0-9]", "", name.lower())


def close_presets(kind: str, name: str, n: int = 3) -> list[str]:
    """The presets of `kind` nearest to `name`, best first: a name equal but for case and separators, names
    it begins, then difflib's closest (ratio at least 0.6) over names without separators."""
    names = preset_names(kind)
    keys = {_key(p): p for p in names}
    key = _key(name)
    exact = [keys[key]] if key in keys else []
    longer = [keys[k] for k in sorted(keys) if key and k.startswith(key)]  # "gpt3" -> gpt3-175b
    near = [keys[k] for k in difflib.get_close_matches(key, list(keys), n=n, cutoff=0.6)]
    return list(dict.fromkeys(exact + longer[:n] + near))[:n]


def did_you_mean(kind: str, name: str) -> str:
    """" did you mean 'x' or 'y'?" for the presets of `kind` close to `name`, or ""."""
    close = close_presets(kind, name)
    if not close:
        return ""
    return " did you mean " + " or ".join(repr(c) for c in close) + "?"
