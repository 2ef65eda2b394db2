"""Output files written whole or not at all: a temporary file beside the target, renamed over it once
complete (`os.replace` is atomic on one file system), removed on any failure; an operating-system error
(a folder in the way, a full disk, no permission) becomes a SpecError that names the file."""

from __future__ import annotations

import math
import os
import secrets
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from armillary.errors import SpecError

_move = os.replace  # the one step that makes a written file appear (tests fail it to stand for a full disk)


def check_writable(path: Path) -> None:
    """Fail before the work starts when `path` cannot be written: a folder in its place, a missing or
    read-only folder."""
    if path.is_dir():
        raise SpecError(f"cannot write {path}: it is a folder")
    if path.exists() and not path.is_file():
        raise SpecError(f"cannot write {path}: not a regular file (a device or a pipe)")
    folder = path.parent
    if not folder.is_dir():
        raise SpecError(f"cannot write {path}: the folder {folder} does not exist")
    if not os.access(folder, os.W_OK):
        raise SpecError(f"cannot write {path}: the folder {folder} is not writable")


def _new_file(path: Path) -> Path:
    """An empty file beside `path` under an unused name, with the permissions the user's umask gives new
    files (a target that exists keeps its own), unlike `tempfile.mkstemp`'s owner-only 0600."""
    mode = path.stat().st_mode & 0o777 if path.is_file() else 0o666
    for _ in range(100):
        temporary = path.parent / f".{path.name}.{secrets.token_hex(4)}.tmp"
        try:
            os.close(os.open(temporary, os.O_CREAT | os.O_EXCL | os.O_WRONLY, mode))
        except FileExistsError:
            continue
        except OSError as e:
            raise SpecError(f"cannot write {path}: {e.strerror or e}") from None
        if path.is_file():
            os.chmod(temporary, mode)  # exactly the target's, whatever the umask
        return temporary
    raise SpecError(f"cannot write {path}: no free temporary name beside it")


@contextmanager
def replaced(path: Path) -> Iterator[Path]:
    """A temporary path to write; when the block ends without error it replaces `path`."""
    check_writable(path)
    temporary = _new_file(path)
    try:
        yield temporary
        _move(temporary, path)
    except OSError as e:
        raise SpecError(f"cannot write {path}: {e.strerror or e}") from None
    finally:
        temporary.unlink(missing_ok=True)


@contextmanager
def replaced_files(folder: Path) -> Iterator[Path]:
    """A temporary folder inside `folder` to write several files into; when the block ends without error
    they are moved into `folder` (all of them, or none when the writing failed)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".armillary-", dir=folder))
    except OSError as e:
        raise SpecError(f"cannot write into {folder}: {e.strerror or e}") from None
    try:
        yield staging
        for file in staging.iterdir():
            _move(file, folder / file.name)
    except OSError as e:
        raise SpecError(f"cannot write into {folder}: {e.strerror or e}") from None
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def check_folder_writable(folder: Path) -> None:
    """Fail before the work starts when files cannot be written into `folder` (made if missing): a file
    in its place, or a nearest existing parent that is not a writable folder."""
    if folder.exists() and not folder.is_dir():
        raise SpecError(f"cannot write into {folder}: a file is in the way of that folder")
    existing = next(p for p in (folder, *folder.parents) if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK):
        raise SpecError(f"cannot write into {folder}: {existing} is not a writable folder")


def finite_for_json(value: Any) -> Any:
    """`value` with every NaN or infinity as None (JSON has no NaN: null, a gap in a plot, "unknown" in a
    record), through nested dicts, lists and tuples."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite_for_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [finite_for_json(v) for v in value]
    return value
