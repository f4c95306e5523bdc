"""Kernel names and kernel launches of one file, as the normaliser meets them (pure).

`KernelNames` sums each kernel name's count and duration (`KernelTime` events at the end);
`LaunchJoin` counts the launch calls (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel and
their variants: `is_launch_call`) and their CPU time, and the kernels joined to them: the
queue delay (kernel start minus call start) and whether the kernel ran shorter than its call
go out in `LaunchDelays` parts of at most DELAYS kernels. `Launches` is the Kineto reader's
one table by `correlation`, whichever of a launch call and its GPU work comes first in the
file: it joins a kernel to its launch call, offers a graph launch its kernels and copies
(`collector.graphs`), and keeps the launching thread of a call for the comm kernels that wait
for it. Memory is bounded by constants: NAMES names (later ones are summed into the row
without a name), and calls or GPU work waiting for their partner in two generations of at most
WAITING each (one forgotten is a kernel left unjoined, never a wrong join).
"""

from __future__ import annotations

import itertools
from array import array
from collections.abc import Mapping
from typing import Any, Final

from commscope.collector.graphs import KERNELS, GraphJoin, add_copy, add_kernel, graph_id
from commscope.model.int64s import pack
from commscope.model.schema import Event, KernelTime, LaunchDelays

NAMES: Final = 1 << 14
DELAYS: Final = 4096
WAITING: Final = 1 << 16
MAX_NAME: Final = 4096
# Kernel launch calls by name (CUDA runtime and driver, HIP, MTIA): cudaLaunchKernel,
# cudaLaunchKernelExC, cuLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, hipExtLaunchKernel,
# hipModuleLaunchKernel, mtiaLaunchKernel (each maybe `_ptsz`), cudaLaunchCooperativeKernel.
# A graph launch (cudaGraphLaunch) starts many kernels with one call: not a kernel's launch
# (`collector.graphs` attributes a graph's kernels to it).
_LAUNCH_WORDS: Final = ("LaunchKernel", "LaunchCooperativeKernel")


def is_launch_call(name: str) -> bool:
    """Whether a runtime or driver call of this name launches one kernel."""
    return any(word in name for word in _LAUNCH_WORDS)


class KernelNames:
    """Count and Σ duration (ns) per kernel name; past NAMES names, the rest summed."""

    __slots__ = ("comm", "count", "other_count", "other_ns", "time_ns")

    def __init__(self) -> None:
        self.count: dict[str, int] = {}
        self.time_ns: dict[str, int] = {}
        self.comm: set[str] = set()
        self.other_count = self.other_ns = 0

    def add(self, name: str, dur_ns: int, communication: bool) -> None:
        count = self.count.get(name)
        if count is not None:
            self.count[name] = count + 1
            self.time_ns[name] += dur_ns
        elif len(self.count) < NAMES and len(name) <= MAX_NAME:
            self.count[name], self.time_ns[name] = 1, dur_ns
            if communication:
                self.comm.add(name)
        else:
            self.other_count += 1
            self.other_ns += dur_ns

    def events(self) -> list[KernelTime]:
        """One `KernelTime` a name (in name order), and one for the rest if any."""
        found = [
            KernelTime(name, self.count[name], self.time_ns[name], name in self.comm)
            for name in sorted(self.count)
        ]
        if self.other_count:
            found.append(KernelTime(None, self.other_count, self.other_ns))
        return found


class LaunchJoin:
    """Launch calls counted and kernels joined to them (what the readers found by correlation:
    `Launches` here, a join in SQL for Nsight Systems), out in `LaunchDelays` parts."""

    __slots__ = ("call_ns", "calls", "delays", "kernels", "shorter")

    def __init__(self) -> None:
        self.calls = self.call_ns = self.kernels = self.shorter = 0
        self.delays = array("q")

    def counted(self, dur_ns: int) -> None:
        """A launch call counted (its kernel joined elsewhere: `joined`)."""
        self.calls += 1
        self.call_ns += dur_ns

    def joined(self, out: list[Event], call: tuple[int, int], kernel: tuple[int, int]) -> None:
        """A kernel and its launch call, each (start, duration) in ns."""
        self.kernels += 1
        self.shorter += kernel[1] < call[1]
        delays = self.delays
        delays.append(kernel[0] - call[0])
        if len(delays) >= DELAYS:
            out.append(self.part())

    def part(self) -> LaunchDelays:
        """What was counted since the last part, as one (the counters start again)."""
        found = LaunchDelays(self.calls, self.call_ns, self.kernels, self.shorter,
                             pack(self.delays))  # fmt: skip
        self.calls = self.call_ns = self.kernels = self.shorter = 0
        self.delays = array("q")
        return found

    def finish(self, out: list[Event]) -> None:
        """The last part (when a launch call was met at all)."""
        if self.calls or self.kernels:
            out.append(self.part())


# What `Launches` keeps of a launch met before its kernels: the launching thread (None: the
# trace gave none usable), the call's start (ns), its duration (ns) while a kernel may still
# join it as its launch call (else -1).
_Call = tuple[int | None, int, int]
# What it keeps of GPU work met before its launch call: a graph replay's sums (`graphs`), then
# the last kernel's start and duration (ns), and whether one of its kernels needs no launch.
_START, _DUR, LANDED = 6, 7, 8
KERNEL_LAUNCH, GRAPH_LAUNCH = 1, 2  # the launch calls of one kernel, of a graph


class Launches:
    """One file's launch calls and the GPU work they start, joined by correlation, in one
    table each way: calls met first (kept for their kernels, and for the comm kernels that
    wait for their launching thread: `launch`), GPU work met first (waiting for its call).
    Both in two generations of at most WAITING; a launch forgotten is a kernel left unjoined
    (and a comm kernel without its launch, counted by the normaliser), never a wrong join."""

    __slots__ = ("_calls", "_early", "_old_calls", "_old_early", "graphs", "join", "out")

    def __init__(self, out: list[Event]) -> None:
        self.out = out  # the normaliser's: `LaunchDelays` parts go there as they fill
        self._calls: dict[int, _Call] = {}
        self._old_calls: dict[int, _Call] = {}
        self._early: dict[int, list[int]] = {}
        self._old_early: dict[int, list[int]] = {}
        self.join = LaunchJoin()  # kernels joined to their launch calls
        self.graphs = GraphJoin()  # kernels replayed by graph launches (`collector.graphs`)

    @property
    def held(self) -> int:
        """The launch calls kept."""
        return len(self._calls) + len(self._old_calls)

    def call(self, correlation: int, kind: int, start_ns: int, dur_ns: int) -> list[int] | None:
        """A launch call of `kind` (0: neither kind, or no usable duration): the GPU work of
        its correlation met before it (None: none), taken by it unless `kind` is 0."""
        if not kind:
            return self._early.get(correlation) or self._old_early.get(correlation)
        met = self._early.pop(correlation, None)
        if met is None and self._old_early:
            met = self._old_early.pop(correlation, None)
        if kind == KERNEL_LAUNCH:
            self.join.counted(dur_ns)
            if met is not None and met[KERNELS]:
                self.join.joined(self.out, (start_ns, dur_ns), (met[_START], met[_DUR]))
        else:
            self.graphs.launch(correlation, dur_ns, met)
        return met

    def keep(self, correlation: int, call: _Call) -> None:
        """A launch call whose kernels are yet to come."""
        calls = self._calls
        calls[correlation] = call
        if len(calls) >= WAITING:
            self._old_calls, self._calls = calls, {}

    def launch(self, correlation: int) -> tuple[int, int] | None:
        """The launching thread and start (ns) of a kept call; None if none or no thread."""
        call = self._calls.get(correlation) or self._old_calls.get(correlation)
        return None if call is None or call[0] is None else (call[0], call[1])

    def kernel(
        self,
        correlation: int,
        span: tuple[int, int],
        comm: bool,
        args: Mapping[str, Any],
        lands: bool,
    ) -> None:
        """A kernel (its start and duration, ns): joined to its launch call if that came
        first, else to an open graph launch, else waiting for its launch (`lands`: it needs
        no launch itself)."""
        calls = self._calls
        call = calls.get(correlation)
        if call is None and self._old_calls:
            calls = self._old_calls
            call = calls.get(correlation)
        if call is not None and call[2] >= 0:
            calls[correlation] = (call[0], call[1], -1)
            self.join.joined(self.out, (call[1], call[2]), span)
            return
        graph = args.get("graph id")  # from CUDA 12 (`graph_id`)
        if graph is not None:
            graph = graph_id(graph)
        if self.graphs.launches and self.graphs.replayed(correlation, span[1], comm, graph):
            return
        met = self._early.get(correlation) or self._old_early.get(correlation)
        if met is None:
            met = self._wait(correlation)
        add_kernel(met, span[1], comm, graph)
        met[_START], met[_DUR] = span
        met[LANDED] |= lands and call is None

    def copy(self, correlation: int, graph: int | None) -> None:
        """A memcpy or memset: a node of the graph launch of its correlation, if one comes."""
        if not (self.graphs.launches and self.graphs.copied(correlation, graph)):
            met = self._early.get(correlation) or self._old_early.get(correlation)
            add_copy(met or self._wait(correlation), graph)

    def _wait(self, correlation: int) -> list[int]:
        """A new record of GPU work met before its launch call; past WAITING, the older
        generation is forgotten (a graph's kernels among it count by their graph id)."""
        if len(self._early) >= WAITING:
            self.graphs.orphan(self._old_early.values())
            self._old_early, self._early = self._early, {}
        met = self._early[correlation] = [0, 0, 0, 0, 0, 0, 0, 0, 0]
        return met

    def finish(self) -> None:
        """The last launch delays and the file's graph tally, if any (what waits is
        forgotten with this table: the caller starts another)."""
        self.join.finish(self.out)
        waiting = itertools.chain(self._old_early.values(), self._early.values())
        if (tally := self.graphs.finish(waiting)) is not None:
            self.out.append(tally)
