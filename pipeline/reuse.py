"""Reports that reuse the work of earlier ones (pure): the live aggregator's.

The aggregator rebuilds its report every few seconds over a run whose windows, once complete,
do not change. `WindowCache` is a `report.Parts` that keeps what each report found, by the
identities of the objects it was found of, and gives it again while they are the very same:
`WindowCache().build(windows, files, options)` is `report.build_report(windows, files,
options)`, each complete window analysed once however often it is built.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Generic, Literal, TypeVar

from commscope.model.schema import Links, OpTally, RankResult, Report, Sketch, Window
from commscope.pipeline import crossrank, hosts
from commscope.pipeline.accumulate import SKETCHED, bandwidth_sketch, merge_results
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.report import (
    Chain,
    CrossSections,
    FileCounts,
    LinksGiven,
    Options,
    ParsedFile,
    assemble,
    by_rank,
    cross_sections,
    file_counts,
    window_facts,
    window_sections,
    with_links,
)
from commscope.pipeline.sections import Context
from msgspec.structs import replace

# `exact(results, again)`: `report.Parts.exact`
_Exact = Callable[[Sequence[RankResult], bool], AbstractContextManager[object]]


def _as_they_are(results: Sequence[RankResult], again: bool) -> AbstractContextManager[object]:
    return nullcontext()


class WindowCache:
    """What the live aggregator's report reuses between refreshes, as a finished window does
    not change: each window's cross-rank facts, keyed by the identity of its files' results
    and metadata alone (they depend on nothing else, so a renamed window or a new context
    reuses them, and a file whose per-call list was dropped once they were known is never
    matched again while the window stays as it is); and each window's sections, reused while
    its files and context are unchanged (under its new name when the window is renamed).
    Every read of exact bandwidth samples (a window's sections found anew, a rank of one
    window in the run) happens inside `exact`: the live aggregation gives back there the
    samples it shed (`residency.Residency.shed`). Each window's bandwidth samples are
    sketched once (`sketch`, for its facts) and those sketches reused where its windows merge,
    the run's ranks pool, and the aggregator sheds the samples."""

    def __init__(self, exact: _Exact = _as_they_are) -> None:
        self.exact = exact
        self._sections: dict[str, tuple[Context, tuple[object, ...], Window]] = {}
        self._cross = Kept[CrossRank]()
        # each rank's windows merged (a single window is not sketched: folds from two on)
        self._runs = _Folds[RankResult](lambda parts: merge_results(parts, self.sketch), 2)
        # the same without samples (a mid-run report's: `build_report`'s `metrics_only`)
        self._sums = _Folds[RankResult](
            lambda parts: merge_results(parts, self.sketch, samples=False), 1
        )
        # the windows' cross-rank facts pooled, the clocks aside (`pooled`)
        self._pools = _Folds[CrossRank](lambda parts: crossrank.pooled(parts, clocked=False), 2)
        # each window tally's sketches by its identity (it kept alive), as long as used
        self._sketches: dict[int, tuple[OpTally, dict[str, Sketch]]] = {}
        self._sketches_used: set[int] = set()
        self._sketches_before: set[int] = set()  # those used in the interval before
        # each window's files counted for the report's inputs (`file_counts`), as long as used
        self._counts = Kept[FileCounts]()
        # the run's α-β fits and skew section, with the pooled facts they came from (`crossed`)
        self._crossed: tuple[CrossRank, tuple[float | None, bool], CrossSections] | None = None
        # the run's intra- vs inter-node section, with the facts and options it came from
        self._links: tuple[CrossRank | None, LinksGiven, Links] | None = None
        # each window given its own section: the window it was given to, the options, the result
        self._linked: dict[str, tuple[Window, LinksGiven, Window]] = {}

    def build(
        self, windows: Sequence[str], parsed: Sequence[ParsedFile], options: Options
    ) -> Report:
        """`report.build_report`, reusing what earlier builds found."""
        return assemble(windows, parsed, options, self)

    def sketch(self, tally: OpTally, which: Literal["algbw", "busbw"]) -> Sketch:
        """`accumulate.bandwidth_sketch`, a window's samples sketched once: kept until a call
        of `keep` finds them unused since the call before the one before (a window's sections,
        found before `keep`, and the run's merge, after it, fall in two intervals), or until
        `forget`; a tally that keeps sketches is asked directly."""
        if isinstance(tally, SKETCHED):
            return bandwidth_sketch(tally, which)
        key = id(tally)
        self._sketches_used.add(key)
        entry = self._sketches.get(key)
        if entry is None:
            entry = self._sketches[key] = (tally, {})
        found = entry[1].get(which)
        if found is None:
            found = entry[1][which] = bandwidth_sketch(tally, which)
        return found

    def window(
        self, name: str, items: dict[int, ParsedFile], context: Context, chain: Chain | None = None
    ) -> tuple[Window, CrossRank]:
        """`chain`: an NCCL Inspector window's neighbours (`report.window_facts`): its facts
        depend on them too."""
        key = _chain_key(items, chain)
        cross = self._cross_facts(items, key, chain)
        found = self._known(name, context, key)
        if found is None:
            with self.exact([item.result for item in items.values()], False):
                found = window_sections(name, items, context, cross, self.sketch)
        self._sections[name] = (context, key, found)
        return found, cross

    def open_window(self, name: str, items: dict[int, ParsedFile], context: Context) -> Window:
        """An open window's sections without its cross-rank ones (`build_report`'s
        `waiting`): found anew each time, never kept (its files are still arriving). Its
        cross-rank facts, if known (`prime`), are kept for the report that gives them."""
        self._cross.touch(_key(items))
        with self.exact([item.result for item in items.values()], False):
            return window_sections(name, items, context, None, self.sketch)

    def _known(self, name: str, context: Context, key: tuple[object, ...]) -> Window | None:
        """The window's sections if known: under its name, or under another (the window was
        renamed: only its name changes)."""
        entry = self._sections.get(name)
        if entry is not None and entry[0] == context and _same(entry[1], key):
            return entry[2]
        for other, (known_context, known_key, found) in self._sections.items():
            if other != name and known_context == context and _same_files(known_key, key):
                return replace(found, name=name)
        return None

    def _cross_facts(
        self, items: dict[int, ParsedFile], key: tuple[object, ...], chain: Chain | None = None
    ) -> CrossRank:
        """The window's cross-rank facts, kept by the identities of the objects in `key`."""
        return self._cross.get(key, lambda: window_facts(items, chain))

    def forget(self, tallies: Iterable[OpTally]) -> None:
        """Let these tallies' sketches go (the aggregator shed their samples: no figure reads
        them again)."""
        for tally in tallies:
            self._sketches.pop(id(tally), None)

    def samples_held(self) -> int:
        """How many tallies with exact samples the kept sketches hold alive (memory checks)."""
        return sum(1 for tally, _ in self._sketches.values() if tally.algbw_Bps)

    def merged(self, results: Sequence[RankResult], samples: bool = True) -> RankResult:
        """A rank's windows merged (`merge_results`): a rank whose earlier windows were merged
        for an earlier report folds only its last window into them (a window completes once,
        so the run's figures cost one window's merge a report, not every window's). Without
        `samples`: their counts and sums alone, folded the same way (from one window on)."""
        return (self._runs if samples else self._sums)(results)

    def pooled(self, crosses: Sequence[CrossRank], clocked: bool = True) -> CrossRank:
        """The windows' cross-rank facts pooled (`crossrank.pooled`), folded as `merged` folds:
        a run pooled for an earlier report takes only its new last window, not every window's
        instances again. The clocks are a median over windows, not a fold: found over every
        window when `clocked` (a report for /metrics alone does not read them)."""
        found = self._pools(crosses)
        return crossrank.with_clocks(found, crosses) if clocked else found

    def crossed(self, cross: CrossRank, peak_Bps: float | None, plots: bool) -> CrossSections:
        """`cross_sections`, reused while the run's pooled facts are the very same (`pooled`
        gives the same object while no window was added: a report mid-window)."""
        known = self._crossed
        if known is not None and known[0] is cross and known[1] == (peak_Bps, plots):
            return known[2]
        found = cross_sections(cross, peak_Bps, plots)
        self._crossed = (cross, (peak_Bps, plots), found)
        return found

    def links(self, cross: CrossRank | None, given: LinksGiven) -> Links:
        """`hosts.links`, reused while the run's pooled facts are the very same (as `crossed`)
        and the rest it reads (`given`) equal."""
        known = self._links
        if known is not None and known[0] is cross and known[1] == given:
            return known[2]
        found = hosts.links(cross, *given)
        self._links = (cross, given, found)
        return found

    def linked(self, window: Window, cross: CrossRank, given: LinksGiven) -> Window:
        """`report.with_links`, the same window again while it is the very same and the
        options equal."""
        known = self._linked.get(window.name)
        if known is not None and known[0] is window and known[1] == given:
            return known[2]
        found = with_links(window, cross, given)
        self._linked[window.name] = (window, given, found)
        return found

    def file_counts(self, items: Sequence[ParsedFile]) -> FileCounts:
        """`file_counts` of one window's files, found once while they are the very same."""
        return self._counts.get(items, lambda: file_counts(items))

    def prime(self, parsed: Sequence[ParsedFile], chain: Chain | None = None) -> CrossRank | None:
        """Find one window's cross-rank facts now, from its files, as a report would (kept
        until the report after next, like those a report uses); `chain`: as `window`'s."""
        items = by_rank(parsed)
        if not items:
            return None
        return self._cross_facts(items, _chain_key(items, chain), chain)

    def keep(self, names: Iterable[str]) -> None:
        """Forget the windows not in `names` and the cross-rank facts no window used since the
        last call."""
        wanted = set(names)
        self._sections = {k: v for k, v in self._sections.items() if k in wanted}
        self._linked = {k: v for k, v in self._linked.items() if k in wanted}
        self._cross.keep()
        for folds in (self._runs, self._sums, self._pools):
            folds.keep()
        self._counts.keep()
        recent = self._sketches_used | self._sketches_before
        self._sketches = {k: v for k, v in self._sketches.items() if k in recent}
        self._sketches_before, self._sketches_used = self._sketches_used, set()


T = TypeVar("T")


class Kept(Generic[T]):
    """Values found of sequences of objects, by the objects' identities (an entry holds its
    objects, so their ids are not reused while it lives), each kept until a call of `keep`
    finds it unused since the call before."""

    def __init__(self) -> None:
        self._found: dict[tuple[int, ...], tuple[tuple[object, ...], T]] = {}
        self._used: set[tuple[int, ...]] = set()

    def get(self, objects: Sequence[object], find: Callable[[], T]) -> T:
        """The value kept for these very objects, else `find()`, kept."""
        key = tuple(map(id, objects))
        self._used.add(key)
        entry = self._found.get(key)
        if entry is None:
            entry = self._found[key] = (tuple(objects), find())
        return entry[1]

    def known(self, objects: Sequence[object]) -> T | None:
        """The value kept for these very objects, if any (then kept as used)."""
        key = tuple(map(id, objects))
        entry = self._found.get(key)
        if entry is None:
            return None
        self._used.add(key)
        return entry[1]

    def touch(self, objects: Sequence[object]) -> None:
        """Keep the value of these objects, if any, as if used."""
        self._used.add(tuple(map(id, objects)))

    def keep(self) -> None:
        self._found = {k: v for k, v in self._found.items() if k in self._used}
        self._used = set()

    def clear(self) -> None:
        self._found, self._used = {}, set()

    def __len__(self) -> int:
        return len(self._found)


class _Folds(Generic[T]):
    """Left folds over sequences (a run's windows in order), keyed by the identities of their
    items: a sequence whose all-but-last was folded for an earlier report, that prefix at least
    `shortest` long, folds only its last item into it; each kept until a call of `keep` finds
    it unused since the call before (the items are kept alive with it)."""

    def __init__(self, fold: Callable[[Sequence[T]], T], shortest: int) -> None:
        self._fold, self._shortest = fold, shortest
        self._kept = Kept[T]()

    def __call__(self, items: Sequence[T]) -> T:
        return self._kept.get(items, lambda: self._folded(items))

    def _folded(self, items: Sequence[T]) -> T:
        prior = self._kept.known(items[:-1]) if len(items) > self._shortest else None
        return self._fold([prior, items[-1]] if prior is not None else items)

    def keep(self) -> None:
        self._kept.keep()


def _chain_key(items: dict[int, ParsedFile], chain: Chain | None) -> tuple[object, ...]:
    """What a window's cross-rank facts depend on (`report.window_facts`)."""
    if chain is None:
        return _key(items)
    return (*_key(items), "chain", chain.before, *_key(chain.after))


def _key(items: dict[int, ParsedFile]) -> tuple[object, ...]:
    """What a window's analysis depends on: each rank's result and metadata, by rank."""
    return tuple(x for rank, item in sorted(items.items()) for x in (rank, item.result, item.meta))


def _same(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b, strict=True))


def _same_files(a: tuple[object, ...], b: tuple[object, ...]) -> bool:
    """The same ranks with the very same results and metadata (by identity: never a deep
    comparison of two windows' results)."""
    return len(a) == len(b) and all(
        x is y or (type(x) is int and x == y) for x, y in zip(a, b, strict=True)
    )
