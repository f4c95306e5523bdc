"""Finding trace files on disk and opening them (shell: filesystem).

A window is a folder holding rank files: TorchTitan's `iteration_N/rankK_trace.json[.gz]`, or
any folder of `*.json[.gz]` traces (`tensorboard_trace_handler` names) or Nsight Systems
exports (`*.sqlite`; a `*.nsys-rep` is listed so that the report says to export it first).
Given a run folder, every sub-folder holding traces is a window, in iteration order; given a
window, it is the only one. `*.tmp` files (Kineto renames them when done) and other names are
not traces.
"""

from __future__ import annotations

import gzip
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, cast

from commscope.collector.sources import is_followed, is_input
from commscope.model.errors import ConfigError
from commscope.model.names import rank_in_name, window_names, window_order

_GZIP_MAGIC: Final = b"\x1f\x8b"


@dataclass(frozen=True)
class WindowFiles:
    name: str
    files: tuple[Path, ...]


def is_trace_name(path: Path) -> bool:
    return is_followed(path.name)


def _is_input_name(path: Path) -> bool:
    """A file some source reads (`sources`): the offline report lists it."""
    return is_input(path.name)


def rank_from_name(path: Path) -> int | None:
    """`rank7`, `rank-7`, `rank_7`, `worker7` in the file name, else None."""
    return rank_in_name(path.name)


def find_windows(root: Path) -> list[WindowFiles]:
    """The windows under `root` in time order; ConfigError if there is no trace at all."""
    if not root.exists():
        raise ConfigError(f"{root}: no such file or folder")
    if root.is_file():
        return [WindowFiles(root.parent.name or str(root.parent), (root,))]
    folders = [root, *sorted(p for p in root.rglob("*") if p.is_dir())]
    found = []
    for folder in folders:
        files = tuple(sorted(p for p in folder.iterdir() if p.is_file() and _is_input_name(p)))
        if files:
            found.append((folder, files))
    if not found:
        raise ConfigError(f"{root}: no trace files (*.json, *.json.gz, nsys *.sqlite) found")
    names = window_names(root_name(root), [relative_folder(root, f) for f, _ in found])
    windows = [WindowFiles(name, files) for name, (_, files) in zip(names, found, strict=True)]
    return sorted(windows, key=lambda w: window_order(w.name))


def root_name(root: Path) -> str:
    return root.name or str(root)


def relative_folder(root: Path, folder: Path) -> str:
    """`folder` relative to the watched or analysed root, in POSIX form; "." for the root."""
    return folder.relative_to(root).as_posix() if folder != root else "."


def file_size(path: Path) -> int:
    """Its size in bytes; 0 when it cannot be read (gone, or never there)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0


def open_trace(path: Path) -> IO[bytes]:
    """A binary stream of the document, decompressing gzip (detected by its magic bytes)."""
    raw = path.open("rb")
    if raw.read(2) != _GZIP_MAGIC:
        raw.seek(0)
        return raw
    raw.close()
    return cast(IO[bytes], gzip.open(path, "rb"))
