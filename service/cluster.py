"""Per-file work on a dask.distributed cluster (shell: a network client).

`outcomes` runs the work of every file as a task on the cluster whose scheduler is at
`address` (`commscope report DIR --dask tcp://host:8786`) and hands the results back in the
files' order, so the report is the one a local run makes, byte for byte. The workers read the
files themselves: they must see them at the same absolute paths (a shared filesystem) and run
this version of commscope (checked before any task is sent). `distributed` is the optional
`dask` extra, imported only here and only when asked for; when it is missing, the scheduler
does not answer within the connect timeout, or a worker runs another commscope, the run stops
with a `ClusterError` before any file is read. A file whose task killed its workers
(dask retries it on another worker first) is reported failed, with that reason.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from importlib import import_module
from pathlib import Path
from types import ModuleType
from typing import Any, Final, TypeVar

from commscope.model.errors import ClusterError
from commscope.model.schema import SCHEMA_VERSION
from commscope.model.version import installed_version
from commscope.service.parallel import Progress, tell_done

CONNECT_TIMEOUT_S: Final = 10.0
_KILLED: Final = "the parsing task killed its Dask workers (out of memory?)"
_EXTRA: Final = "pip install 'commscope[dask]'"

R = TypeVar("R")


@dataclass(frozen=True)
class Cluster:
    """Where the scheduler is, and how long to wait for it to answer."""

    address: str
    timeout_s: float = CONNECT_TIMEOUT_S


def outcomes(
    files: list[tuple[str, Path]],
    cluster: Cluster,
    work: Callable[..., R],
    failed: Callable[[str], R],
    *,
    progress: Progress | None = None,
    tally: Callable[[R], tuple[int, int]] | None = None,
) -> list[R]:
    """`work(window, absolute path, name=path)` of every file on the cluster, in the files'
    order (a worker's working folder is its own: it is given the absolute path, the report
    names the file as given); `failed(KILLED)` for a file whose task killed its workers.
    `tally(result)`: (bytes, events) for the progress display."""
    distributed = _distributed()
    with _client(distributed, cluster.address, cluster.timeout_s) as client:
        _check_workers(client, cluster.address)
        futures = [client.submit(work, w, p.absolute(), name=p, pure=False) for w, p in files]
        for future in distributed.as_completed(futures, loop=client.loop):
            if future.status == "finished":
                tell_done(progress, tally, future.result())
        return [_result(distributed, future, failed) for future in futures]


def _distributed() -> ModuleType:
    try:
        return import_module("distributed")
    except ImportError as exc:
        raise ClusterError(f"--dask needs the dask extra ({_EXTRA}): {exc}") from None


def _client(distributed: ModuleType, address: str, timeout_s: float) -> Any:
    try:
        return distributed.Client(address, timeout=timeout_s, set_as_default=False)
    except (OSError, TimeoutError, ValueError, TypeError) as exc:
        raise ClusterError(
            f"no Dask scheduler answered at {address} within {timeout_s:g} s ({_first_line(exc)})"
        ) from None


def _check_workers(client: Any, address: str) -> None:
    """Every worker runs this commscope (its version and report schema)."""
    ours = own_version()
    try:
        theirs = client.run(own_version)
    except ImportError as exc:
        raise ClusterError(
            f"the Dask workers at {address} cannot import commscope ({exc})"
        ) from None
    if not theirs:
        raise ClusterError(f"the Dask scheduler at {address} has no workers")
    other = sorted({v for v in theirs.values() if v != ours})
    if other:
        raise ClusterError(
            f"the Dask workers at {address} run commscope {', '.join(other)}, this is {ours}: "
            "install the same version on the workers"
        )


def own_version() -> str:
    """This commscope's version and report schema (what the workers must match)."""
    return f"{installed_version()} (schema {SCHEMA_VERSION})"


def _result(distributed: ModuleType, future: Any, failed: Callable[[str], R]) -> R:
    if future.status == "error" and isinstance(future.exception(), distributed.KilledWorker):
        return failed(_KILLED)
    result: R = future.result()
    return result


def _first_line(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
