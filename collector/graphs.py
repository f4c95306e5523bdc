"""CUDA graph launches and the kernels they replay, as one file's reader meets them (pure).

A graph launch call (cudaGraphLaunch, cuGraphLaunch, hipGraphLaunch and their variants:
`is_graph_launch`) starts every kernel of its graph with one call. CUPTI gives each of those
kernels the call's correlation id and, from CUDA 12, the graph's id (Kineto's `graph id` arg,
Nsight Systems' graphId column; 0 outside graphs). `GraphJoin` attributes each kernel to the
graph launch of its correlation, whichever comes first in the file; a kernel with a graph id
whose launch never comes is attributed by its id alone (`unlaunched`), and a launch that no
kernel joined is `empty` (the profiler did not record its replay) unless a memcpy or memset
of its correlation was recorded (`copy`: a node of its graph; such a launch replays no kernel
but is no gap). Kernels that joined a
kernel launch call (`launches.LaunchJoin`) are none of a graph's and are not offered here. The
Kineto reader keeps what comes before its launch in its own table (`launches.Launches`, one
for every launch): it offers a launch what met it first (`launch`), a kernel or copy to the
open launches only (`replayed`, `copied`), and what no launch took to `orphan`.

Memory is bounded by constants: launches and waiting kernels (summed per correlation) in two
generations of at most WAITING each (a launch forgotten is closed as it stands, a kernel
forgotten counts only if it has a graph id), and GRAPHS graph ids, later ones summed in the
row without an id.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable
from typing import Final

from commscope.model.wire import MAX_GRAPHS, GraphRow, GraphTally

WAITING: Final = 1 << 16
GRAPHS: Final = MAX_GRAPHS
_MAX_ID: Final = 2**62
# A replay's sums: kernels, Σ ns, communication kernels, their Σ ns, the graph id (0: none),
# and its memcpy and memset nodes (a longer list may carry more after them: `launches`).
KERNELS, _NS, _COMM, _COMM_NS, _GRAPH, _COPIES = range(6)


def is_graph_launch(name: str) -> bool:
    """Whether a runtime or driver call of this name launches a CUDA (or HIP) graph."""
    return "GraphLaunch" in name


def graph_id(value: object) -> int | None:
    """A kernel's graph id as the trace gives it; None for 0 (no graph) or no usable id."""
    return value if type(value) is int and 0 < value <= _MAX_ID else None


def _replay() -> list[int]:
    return [0, 0, 0, 0, 0, 0]


class GraphJoin:
    """Graph launches and the kernels of their correlation; see the module docstring."""

    __slots__ = ("_old_open", "_old_waiting", "_open", "_rows", "_waiting", "call_ns",
                 "empty", "launches", "unlaunched")  # fmt: skip

    def __init__(self) -> None:
        self._open: dict[int, list[int]] = {}  # launch correlation -> its replay
        self._old_open: dict[int, list[int]] = {}
        self._waiting: dict[int, list[int]] = {}  # kernels before their launch
        self._old_waiting: dict[int, list[int]] = {}
        self._rows: dict[int | None, list[int]] = {}  # graph -> launches, kernels, ns, ...
        self.launches = self.call_ns = self.empty = self.unlaunched = 0

    def launch(self, correlation: int, dur_ns: int, met: list[int] | None = None) -> None:
        """A graph launch call; the kernels of its correlation met so far join it (`met`: what
        the caller kept of them, else what waits here)."""
        self.launches += 1
        self.call_ns += dur_ns
        replay = (
            met or self._waiting.pop(correlation, None) or self._old_waiting.pop(correlation, None)
        )
        if len(self._open) >= WAITING:
            for old in self._old_open.values():
                self._close(old)
            self._old_open, self._open = self._open, {}
        self._open[correlation] = replay or _replay()

    def kernel(self, correlation: int, dur_ns: int, comm: bool, graph: int | None) -> None:
        """A kernel not joined to a kernel launch call: to its graph launch, or waiting."""
        if not self.replayed(correlation, dur_ns, comm, graph):
            add_kernel(
                self._waiting.get(correlation) or self._wait(correlation), dur_ns, comm, graph
            )

    def replayed(self, correlation: int, dur_ns: int, comm: bool, graph: int | None) -> bool:
        """A kernel added to the open graph launch of its correlation (False: none open)."""
        replay = self._open.get(correlation) or self._old_open.get(correlation)
        if replay is None:
            return False
        add_kernel(replay, dur_ns, comm, graph)
        return True

    def copy(self, correlation: int, graph: int | None) -> None:
        """A memcpy or memset: a node of the graph launch of its correlation, if one comes (it
        adds no kernel, but its launch is not empty); waiting like a kernel until then."""
        if not self.copied(correlation, graph):
            add_copy(self._waiting.get(correlation) or self._wait(correlation), graph)

    def copied(self, correlation: int, graph: int | None) -> bool:
        """A memcpy or memset added to the open graph launch of its correlation (False: none)."""
        replay = self._open.get(correlation) or self._old_open.get(correlation)
        if replay is None:
            return False
        add_copy(replay, graph)
        return True

    def _wait(self, correlation: int) -> list[int]:
        if len(self._waiting) >= WAITING:
            self.orphan(self._old_waiting.values())
            self._old_waiting, self._waiting = self._waiting, {}
        replay = self._waiting[correlation] = _replay()
        return replay

    def orphan(self, waiting: Iterable[list[int]]) -> None:
        """Kernels and copies whose graph launch never came (`_orphan` each)."""
        for kernels in waiting:
            self._orphan(kernels)

    def _close(self, replay: list[int]) -> None:
        """A launch and what joined it, into its graph's row."""
        self.empty += replay[KERNELS] == 0 and replay[_COPIES] == 0
        self._add(replay, launches=1)

    def _orphan(self, kernels: list[int]) -> None:
        """Kernels no graph launch joined: a graph's only if they carry its id."""
        if kernels[_GRAPH] and kernels[KERNELS]:
            self.unlaunched += kernels[KERNELS]
            self._add(kernels, launches=0)

    def _add(self, replay: list[int], launches: int) -> None:
        graph = replay[_GRAPH] or None
        if graph not in self._rows and len(self._rows) >= GRAPHS:
            graph = None
        row = self._rows.setdefault(graph, [0, 0, 0, 0, 0])
        row[0] += launches
        for i in (KERNELS, _NS, _COMM, _COMM_NS):
            row[i + 1] += replay[i]

    def finish(self, waiting: Iterable[list[int]] = ()) -> GraphTally | None:
        """The file's tally (None when it holds no graph launch and no graph kernel);
        `waiting`: what the caller kept that no launch took (`orphan`)."""
        for replays in (self._old_open, self._open):
            for replay in replays.values():
                self._close(replay)
        self.orphan(itertools.chain(self._old_waiting.values(), self._waiting.values(), waiting))
        self._open, self._old_open, self._waiting, self._old_waiting = {}, {}, {}, {}
        if not self.launches and not self._rows:
            return None
        return GraphTally(launches=self.launches, call_ns=self.call_ns, empty=self.empty,
                          unlaunched=self.unlaunched, rows=rows(self._rows))  # fmt: skip


def add_kernel(replay: list[int], dur_ns: int, comm: bool, graph: int | None) -> None:
    """A kernel into a replay's sums (or a record of what waits for its launch)."""
    replay[KERNELS] += 1
    replay[_NS] += dur_ns
    if comm:
        replay[_COMM] += 1
        replay[_COMM_NS] += dur_ns
    if graph is not None:
        replay[_GRAPH] = graph


def add_copy(replay: list[int], graph: int | None) -> None:
    """A memcpy or memset node into a replay's sums."""
    replay[_COPIES] += 1
    replay[_GRAPH] = graph or replay[_GRAPH]


def rows(sums: dict[int | None, list[int]]) -> list[GraphRow]:
    """Graph rows in id order, the row without an id last."""
    ordered = sorted((g for g in sums if g is not None), key=int)
    keys: list[int | None] = [*ordered, *([None] if None in sums else [])]
    return [GraphRow(g, *sums[g]) for g in keys]
