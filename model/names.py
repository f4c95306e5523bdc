"""What trace file and folder names say, whatever the source (pure: strings only, no
filesystem).

The rank in a file name (`rank7`, `rank-7`, `rank_7`, `worker7`), the host in
`tensorboard_trace_handler`'s names, whether a name says it is a trace, and the windows' names
and order (`iteration_N` by N). The offline run and the live aggregator both read names through
here; which source a name is (the names each source claims) is `collector.sources`.
"""

from __future__ import annotations

import re
from typing import Final

from commscope.model.schema import MAX_LABEL, MAX_RANKS

_RANK_IN_NAME: Final = re.compile(r"(?:rank|worker)[-_]?(\d+)", re.IGNORECASE)
# torch.profiler.tensorboard_trace_handler writes `{worker_name}.{time.time_ns()}.pt.trace.json`
# (`.gz` with use_gzip), worker_name defaulting to `{socket.gethostname()}_{os.getpid()}`
# (torch/profiler/profiler.py); TorchTitan's own `rank{R}_trace.json` names no host
_HANDLER_NAME: Final = re.compile(r"^(.+)_(\d+)\.\d+\.pt\.trace\.json(?:\.gz)?$")
_HOST: Final = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_ITERATION: Final = re.compile(r"iteration_(\d+)$")
# NCCL Inspector logs: `<hostname>-pid<pid>.log` as it writes them, `.jsonl` and gzipped
# forms of that name, and any `.log` / `.jsonl` naming `inspector` (other logs beside the
# traces, such as a training log or `rank0.jsonl`, are not taken for one)
_INSPECTOR_NAME: Final = re.compile(
    r"(?:-pid\d+|inspector[^/]*)\.(?:log|jsonl)(?:\.gz)?$", re.IGNORECASE
)


def rank_in_name(name: str) -> int | None:
    """`rank7`, `rank-7`, `rank_7`, `worker7` in a file name, else None (also for a number no
    rank can be: MAX_RANKS or more)."""
    match = _RANK_IN_NAME.search(name)
    if match is None or len(match.group(1)) > len(str(MAX_RANKS)):
        return None
    rank = int(match.group(1))
    return rank if rank < MAX_RANKS else None


def host_label(value: object) -> str | None:
    """A host name a trace records, stripped, when it is a label (bounded, printable)."""
    if not isinstance(value, str):
        return None
    host = value.strip()
    return host if host and len(host) <= MAX_LABEL and host.isprintable() else None


def host_in_name(name: str) -> str | None:
    """The host in a `{hostname}_{pid}.{time_ns}.pt.trace.json` name, else None: also for a
    worker name that numbers a rank (`worker0_step_12`: a rank, not a host), a host of digits
    alone, or one that is not a host name's characters (or longer than a label)."""
    found = _HANDLER_NAME.match(name)
    if found is None or rank_in_name(found[1]) is not None:
        return None
    host = found[1]
    plain = _HOST.match(host) is not None and len(host) <= MAX_LABEL
    return host if plain and not host.isdigit() else None


def looks_like_trace(path: str) -> bool:
    """Whether the file's name says it is a trace (`rank7`, `worker7`, or `trace` in it, as in
    `rank7_trace.json` and `host_pid.pt.trace.json`): such a file that is not one is skipped
    with its reason, while other JSON beside the traces (`meta.json`) is only ignored."""
    name = base_name(path)
    return _RANK_IN_NAME.search(name) is not None or "trace" in name.lower()


def base_name(path: str) -> str:
    """The last part of a path (pure: no filesystem)."""
    return path.rsplit("/", 1)[-1]


def window_order(name: str) -> tuple[int, int, str]:
    """`iteration_N` folders by N, then any others by name."""
    match = _ITERATION.search(name)
    return (0, int(match.group(1)), name) if match else (1, 0, name)


def window_names(root: str, folders: list[str]) -> list[str]:
    """Each folder's window name: its own name, or its relative path when two names collide
    (e.g. run1/iteration_10 and run2/iteration_10). A window of NCCL Inspector logs at the
    root (`.@<UTC start>`, `collector.inspector_windows`) is the root's name and its start."""
    names = [_at_root(root, f.rsplit("/", 1)[-1]) for f in folders]
    if len(set(names)) == len(names):
        return names
    return [_at_root(root, f) for f in folders]


def _at_root(root: str, folder: str) -> str:
    """`folder`, with the root's own "." named `root`."""
    return root + folder[1:] if folder == "." or folder.startswith(".@") else folder


def is_inspector_name(name: str) -> bool:
    """An NCCL Inspector log's name (see `_INSPECTOR_NAME`)."""
    return _INSPECTOR_NAME.search(name) is not None
