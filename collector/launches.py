"""Kernel names and kernel launches of one file, as the normaliser meets them (pure).

`KernelNames` sums each kernel name's count and duration (`KernelTime` events at the end);
`LaunchJoin` counts the launch calls (cudaLaunchKernel, cuLaunchKernel, hipLaunchKernel and
their variants: `is_launch_call`) and their CPU time, and joins each kernel to its call by
`correlation`, whichever comes first in the file: the queue delay (kernel start minus call
start) and whether the kernel ran shorter than its call go out in `LaunchDelays` parts of at
most DELAYS kernels. Memory is bounded by constants: NAMES names (later ones are summed into
the row without a name), and calls or kernels waiting for their partner in two generations
of at most WAITING each (one forgotten is a kernel left unjoined, never a wrong join).
"""

from __future__ import annotations

from array import array
from typing import Final

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


class _Waiting:
    """Starts and durations (ns) by correlation id, in two generations of WAITING at most."""

    __slots__ = ("dur", "old_dur", "old_start", "start")

    def __init__(self) -> None:
        self.start: dict[int, int] = {}
        self.dur: dict[int, int] = {}
        self.old_start: dict[int, int] = {}
        self.old_dur: dict[int, int] = {}

    def put(self, correlation: int, start_ns: int, dur_ns: int) -> None:
        if len(self.start) >= WAITING:
            self.old_start, self.old_dur = self.start, self.dur
            self.start, self.dur = {}, {}
        self.start[correlation] = start_ns
        self.dur[correlation] = dur_ns

    def take_old(self, correlation: int) -> tuple[int, int] | None:
        """The entry of `correlation` in the older generation, taken out; None if none (the
        newer one is looked up by the caller first: `LaunchJoin.call`, `LaunchJoin.kernel`)."""
        start = self.old_start.pop(correlation, None)
        return None if start is None else (start, self.old_dur.pop(correlation))


class LaunchJoin:
    """Launch calls and kernels joined by correlation; see the module docstring. The two
    methods the normaliser calls for every kernel and launch look up the newer generation of
    waiting partners inline: they are on the parser's hot path."""

    __slots__ = ("_calls", "_kernels", "call_ns", "calls", "delays", "kernels", "shorter")

    def __init__(self) -> None:
        self._calls = _Waiting()
        self._kernels = _Waiting()
        self.calls = self.call_ns = self.kernels = self.shorter = 0
        self.delays = array("q")

    def call(self, out: list[Event], correlation: int, start_ns: int, dur_ns: int) -> None:
        """A launch call; joined now if its kernel came first."""
        self.calls += 1
        self.call_ns += dur_ns
        kernels = self._kernels
        kernel_start = kernels.start.pop(correlation, None)
        if kernel_start is not None:
            self.joined(out, (start_ns, dur_ns), (kernel_start, kernels.dur.pop(correlation)))
        elif (kernel := kernels.take_old(correlation)) is not None:
            self.joined(out, (start_ns, dur_ns), kernel)
        else:
            self._calls.put(correlation, start_ns, dur_ns)

    def counted(self, dur_ns: int) -> None:
        """A launch call counted (its kernel joined elsewhere: `joined`)."""
        self.calls += 1
        self.call_ns += dur_ns

    def kernel(self, out: list[Event], correlation: int, start_ns: int, dur_ns: int) -> bool:
        """A kernel; joined now (True) if its launch call came first."""
        calls = self._calls
        call_start = calls.start.pop(correlation, None)
        if call_start is not None:
            self.joined(out, (call_start, calls.dur.pop(correlation)), (start_ns, dur_ns))
        elif (call := calls.take_old(correlation)) is not None:
            self.joined(out, call, (start_ns, dur_ns))
        else:
            self._kernels.put(correlation, start_ns, dur_ns)
            return False
        return True

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
        """The last part (when a launch call was met at all); what waits is forgotten."""
        if self.calls or self.kernels:
            out.append(self.part())
        self._calls = _Waiting()
        self._kernels = _Waiting()
