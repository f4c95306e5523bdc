"""What of the finished files' results the live aggregation holds in memory (pure).

A file's per-call list (`RankResult.calls`) is read only by the cross-rank matching of its
window, and its bandwidth samples (`OpTally.algbw_Bps`, `busbw_Bps`) only by its window's
sections and, for a rank of one window, the run's; together they grow with the calls, where
the rest of the result does not. Given a loader (the durable copy of a finished file), `shed`
drops the call lists of every complete window once its cross-rank facts are cached, and
replaces its samples by their sketches (`ShedTally`: all the run needs of a rank of several
windows) once its sections are; a report over a window whose files have changed since reloads
its calls first (`reported`), and every figure that reads exact samples reads them back from
the store (`exact`, the `reuse.WindowCache`'s hook). Results are changed in place: the cache
knows a result by its identity.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Set
from contextlib import contextmanager

from commscope.model.schema import FinishedFile, OpTally, RankResult, ShedTally
from commscope.pipeline import straddle
from commscope.pipeline.accumulate import Sketcher, shed_samples
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.report import Chain, ParsedFile
from commscope.pipeline.reuse import WindowCache

Load = Callable[[str], FinishedFile | None]


class Residency:
    """The call lists and samples of `finished` (the aggregation's finished files by stream,
    shared), dropped and given back; `stream_of`: a finished file's stream by its result."""

    def __init__(
        self,
        finished: Mapping[str, FinishedFile],
        stream_of: Callable[[RankResult], str],
        load: Load | None = None,
    ) -> None:
        self.finished, self._stream_of, self.load = finished, stream_of, load
        # finished windows' sections, reused by every report; exact samples read back there
        self.cache = WindowCache(exact=self.exact)
        # folder -> (its finished streams when their call lists were dropped, those dropped)
        self._shed: dict[str, tuple[frozenset[str], set[str]]] = {}
        self._reported: dict[str, set[str]] = {}  # each folder's streams in the last report
        self._kept: set[int] = set()  # results whose samples the last report's run figures read
        self._sampled: set[str] = set()  # streams whose samples were shed (or that had none)
        self._held: set[str] = set()  # complete folders the last report left waiting

    def renewed(self, stream: str) -> None:
        """The stream's result is new (or gone): its samples are not shed."""
        self._sampled.discard(stream)

    def restored(self, stream: str) -> None:
        """A stored file taken back: its call list dropped and its samples sketched at once."""
        if self.load is not None:
            self._drop_calls([stream])
            self._shed_samples([stream])

    def prime(
        self, folder: str, streams: Set[str], parsed: Sequence[ParsedFile], chain: Chain | None
    ) -> CrossRank | None:
        """Match one restored window, `parsed` its files (their call lists read back, then
        dropped again)."""
        for stream in streams:
            self.reload(stream)
        found = self.cache.prime(parsed, chain)
        self._shed[folder] = (frozenset(streams), self._drop_calls(streams))
        return found

    def reported(
        self,
        used: dict[str, set[str]],
        held: set[str],
        changed_windows: Callable[[set[str]], set[str]],
    ) -> None:
        """A report is set out over each folder's streams `used`, the complete folders `held`
        left waiting: give back the call lists and samples of every window whose files changed
        since they were dropped (a file added, rewritten or gone), with the windows that
        depend on them (`changed_windows`)."""
        self._held, self._reported, self._kept = held, used, set()
        changed = {f for f, (streams, _) in self._shed.items() if used.get(f, set()) != streams}
        changed = changed_windows(changed)
        for folder, (_, shed) in list(self._shed.items()):
            if folder in changed:
                del self._shed[folder]
                for stream in sorted(shed):
                    self.reload(stream, samples=True)

    def shed(self, complete: Iterable[str], folders: Mapping[str, Set[str]]) -> int:
        """Drop the call lists, and replace the bandwidth samples by their sketches, of the
        files of every `complete` folder unchanged since the last report (which cached its
        cross-rank facts and sections); the samples that report's run figures read (a rank of
        one window) stay, as the next report reads them too. Call it only once every finished
        file is stored. The number of files that gave up either."""
        if self.load is None:
            return 0
        dropped = 0
        for folder in complete:
            streams = folders[folder]
            if self._reported.get(folder) != streams or folder in self._held:
                continue  # changed since, or waiting: its cross-rank facts are not known yet
            _, shed = self._shed.setdefault(folder, (frozenset(streams), set()))
            newly = self._drop_calls(streams - shed)
            shed |= newly
            sketched = self._shed_samples(streams - self._sampled, self.cache.sketch)
            dropped += len(newly | sketched)
        return dropped

    def _shed_samples(self, streams: Iterable[str], sketcher: Sketcher | None = None) -> set[str]:
        """Replace these files' samples by their sketches, in place (but those the last
        report's run figures read), each found by `sketcher` (the report's, which found them
        already, and then lets them go); the streams that had samples. Each stream done is
        kept in `_sampled`, so that a report does not look at it again until its samples are
        given back (`exact`, `reload`)."""
        sketched = set()
        for stream in streams:
            result = self.finished[stream].result
            if result is not None and id(result) in self._kept:
                continue
            self._sampled.add(stream)
            if result is not None and _has_samples(result):
                ops, result.ops = result.ops, _sketched(result.ops, sketcher)
                self.cache.forget(ops.values())
                sketched.add(stream)
        return sketched

    @contextmanager
    def exact(self, results: Sequence[RankResult], again: bool) -> Iterator[None]:
        """The report reads these results' exact samples: those shed are read back from the
        store, and shed again afterwards (their sketches as they were) unless the next report
        reads them too (`again`)."""
        given = [(result, shed) for result in results if (shed := self._give_back(result))]
        if again:
            self._kept.update(map(id, results))
            self._sampled.difference_update(self._stream_of(r) for r, _ in given)
        yield
        if not again:
            for result, shed in given:
                self.cache.forget(result.ops.values())  # the samples go: their sketches too
                result.ops = shed

    def _give_back(self, result: RankResult) -> dict[str, OpTally] | None:
        """Read back a result's samples if they were shed; its shed tallies (None: not shed)."""
        if not any(isinstance(tally, ShedTally) for tally in result.ops.values()):
            return None
        shed, result.ops = result.ops, self._stored(self._stream_of(result)).ops
        return shed

    def _drop_calls(self, streams: Iterable[str]) -> set[str]:
        """Empty these files' call lists, in place; the streams that had one."""
        dropped = set()
        for stream in streams:
            result = self.finished[stream].result
            if result is not None and result.calls:
                result.calls = []
                dropped.add(stream)
        return dropped

    def reload(self, stream: str, samples: bool = False) -> None:
        """Give back a file's call list (and `samples`: its exact samples) from the store."""
        item = self.finished.get(stream)
        if item is None or item.result is None or self.load is None:
            return  # gone (superseded): nothing to match
        stored = self._stored(stream)
        item.result.calls = stored.calls
        if samples:
            item.result.ops = stored.ops
            self._sampled.discard(stream)

    def _stored(self, stream: str) -> RankResult:
        """A finished file's result as stored."""
        stored = self.load(stream) if self.load is not None else None
        if stored is None or stored.result is None:
            path = self.finished[stream].path
            raise LookupError(f"{path}: the stored result of stream {stream} is missing")
        return stored.result


def affected(changed: set[str], names: dict[str, str], chain: list[str]) -> set[str]:
    """The folders `changed` and those of the NCCL Inspector windows that depend on them: the
    one before and every one after (`straddle`: each depends on the one before)."""
    by_name = {name: folder for folder, name in names.items()}
    touched = {names[f] for f in changed if f in names}
    return changed | {by_name[n] for n in straddle.affected(chain, touched)}


def _has_samples(result: RankResult) -> bool:
    return any(tally.algbw_Bps for tally in result.ops.values())


def _sketched(ops: dict[str, OpTally], sketcher: Sketcher | None) -> dict[str, OpTally]:
    """The tallies with samples given up for their sketches (`accumulate.shed_samples`)."""
    return {
        kind: shed_samples(tally, sketcher) if tally.algbw_Bps else tally
        for kind, tally in ops.items()
    }
