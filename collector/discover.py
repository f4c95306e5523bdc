"""Finding trace files on disk and opening them (shell: filesystem).

A window is a folder holding rank files: TorchTitan's `iteration_N/rankK_trace.json[.gz]`, or
any folder of `*.json[.gz]` traces (`tensorboard_trace_handler` names). Given a run folder,
every sub-folder holding traces is a window, in iteration order; given a window, it is the
only one. `*.tmp` files (Kineto renames them when done) and other names are not traces.
"""

from __future__ import annotations

import gzip
import re
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final, cast

from commscope.collector.errors import ConfigError
from commscope.collector.schema import MAX_RANKS

_TRACE_SUFFIXES: Final = (".json", ".json.gz")
_RANK_IN_NAME: Final = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
_ITERATION: Final = re.compile(r"iteration_(\d+)$")
_GZIP_MAGIC: Final = b"\x1f\x8b"


@dataclass(frozen=True)
class WindowFiles:
    name: str
    files: tuple[Path, ...]


def is_trace_name(path: Path) -> bool:
    return path.name.endswith(_TRACE_SUFFIXES)


def rank_from_name(path: Path) -> int | None:
    """`rank7`, `rank-7`, `rank_7`, `worker7` in the file name, else None (also for a number
    no rank can be: MAX_RANKS or more)."""
    match = _RANK_IN_NAME.search(path.name)
    if match is None or len(match.group(1)) > len(str(MAX_RANKS)):
        return None
    rank = int(match.group(1))
    return rank if rank < MAX_RANKS else None


def looks_like_trace(path: str) -> bool:
    """Whether the file's name says it is a trace (`rank7`, `worker7`, or `trace` in it, as in
    `rank7_trace.json` and `host_pid.pt.trace.json`): such a file that is not one is skipped
    with its reason, while other JSON beside the traces (`meta.json`) is only ignored. Pure:
    the live aggregator uses it too."""
    name = base_name(path)
    return _RANK_IN_NAME.search(name) is not None or "trace" in name.lower()


def base_name(path: str) -> str:
    """The last part of a path (pure: no filesystem)."""
    return path.rsplit("/", 1)[-1]


def window_order(name: str) -> tuple[int, int, str]:
    """`iteration_N` folders by N, then any others by name."""
    match = _ITERATION.search(name)
    return (0, int(match.group(1)), name) if match else (1, 0, name)


def find_windows(root: Path) -> list[WindowFiles]:
    """The windows under `root` in time order; ConfigError if there is no trace at all."""
    if not root.exists():
        raise ConfigError(f"{root}: no such file or folder")
    if root.is_file():
        return [WindowFiles(root.parent.name or str(root.parent), (root,))]
    folders = [root, *sorted(p for p in root.rglob("*") if p.is_dir())]
    found = []
    for folder in folders:
        files = tuple(sorted(p for p in folder.iterdir() if p.is_file() and is_trace_name(p)))
        if files:
            found.append((folder, files))
    if not found:
        raise ConfigError(f"{root}: no trace files (*.json, *.json.gz) found")
    names = window_names(root_name(root), [relative_folder(root, f) for f, _ in found])
    windows = [WindowFiles(name, files) for name, (_, files) in zip(names, found, strict=True)]
    return sorted(windows, key=lambda w: window_order(w.name))


def root_name(root: Path) -> str:
    return root.name or str(root)


def relative_folder(root: Path, folder: Path) -> str:
    """`folder` relative to the watched or analysed root, in POSIX form; "." for the root."""
    return folder.relative_to(root).as_posix() if folder != root else "."


def window_names(root: str, folders: list[str]) -> list[str]:
    """Each folder's window name: its own name, or its relative path when two names collide
    (e.g. run1/iteration_10 and run2/iteration_10). Pure: the live aggregator uses it too."""
    names = [root if f == "." else f.rsplit("/", 1)[-1] for f in folders]
    if len(set(names)) == len(names):
        return names
    return [root if f == "." else f for f in folders]


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
