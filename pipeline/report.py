"""Assembling the report document from parsed files (pure).

Each parsed file is one rank's view of one window. Ranks come from `distributedInfo.rank`,
else from the file name; two files claiming one rank in one window are both skipped, each
reason naming the other. The run's sections use each rank's windows merged; its cross-rank
sections pool the windows' matched collectives (each window's clocks aligned on their own).
The files are those of one job (`jobs` tells a folder's jobs apart); `ranks` places them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from itertools import groupby
from operator import attrgetter
from typing import Generic, Literal, TypeVar

from commscope.model.inspector import is_window
from commscope.model.schema import (
    INSPECTOR_LOGS,
    AlphaBeta,
    Diagnosis,
    FileStats,
    Inputs,
    Links,
    OpTally,
    RankResult,
    Report,
    RunConfig,
    Sections,
    Sketch,
    Skew,
    Skipped,
    TraceMeta,
    Window,
)
from commscope.pipeline import (
    crossrank,
    facts,
    health,
    hosts,
    inspector_sources,
    ranks,
    skew,
    straddle,
)
from commscope.pipeline.accumulate import SKETCHED, Sketcher, bandwidth_sketch, merge_results
from commscope.pipeline.config import JobConfig, global_batch, resolve
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.diagnosis import diagnose
from commscope.pipeline.flops import flops_per_token, hfu_factor, model_shape, peak_flops
from commscope.pipeline.sections import (
    Context,
    metrics_sections,
    peak_bandwidth,
    sections,
    with_split,
)
from msgspec.structs import asdict, replace

CrossSections = tuple[dict[str, dict[str, AlphaBeta]], Skew]  # α-β fits, skew (`cross_sections`)


@dataclass(frozen=True)
class ParsedFile:
    window: str
    path: str
    name_rank: int | None
    meta: TraceMeta
    result: RankResult
    stats: FileStats
    note: str | None = None  # how the reader placed it where the file did not say (nsys ranks)


@dataclass(frozen=True)
class Options:
    config: JobConfig | None = None
    config_path: str | None = None
    peak_override_Bps: float | None = None
    flops_per_token: float | None = None
    params: int | None = None
    peak_flops_override: float | None = None
    hosts: dict[int, str] | None = None  # --hosts: rank -> host (`hosts.parse_hosts`)
    net_peak_Bps: float | None = None  # --net-peak: the inter-node link's peak per direction


def assign_ranks(
    parsed: Iterable[ParsedFile],
) -> tuple[dict[tuple[str, int], ParsedFile], list[Skipped]]:
    """Files keyed by (window, rank), and the files that could not be placed (`ranks`)."""
    placement = ranks.assign(parsed)
    return placement.placed, placement.skipped


# `exact(results, again)`: the context in which a report reads these results' exact bandwidth
# samples; `again`: the next report will read them too.
Exact = Callable[[Sequence[RankResult], bool], AbstractContextManager[object]]


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
    samples it shed (`Aggregation.shed`). Each window's bandwidth samples are sketched once
    (`sketch`, for its facts) and those sketches reused where its windows merge, the run's
    ranks pool, and the aggregator sheds the samples."""

    def __init__(self, exact: Exact = _as_they_are) -> None:
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
        self._links: tuple[CrossRank | None, tuple[object, ...], Links] | None = None

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
        """`chain`: an NCCL Inspector window's neighbours (`straddle`): its matching leaves
        out what the window before took and takes the next window's members of its split
        instances, so it depends on them too."""
        key = _key(items) if chain is None else (*_key(items), *chain.key())
        cross = self._cross_facts(items, key, chain)
        found = self._known(name, context, key)
        if found is None:
            with self.exact([item.result for item in items.values()], False):
                found = _window(name, items, context, cross, self.sketch)
        self._sections[name] = (context, key, found)
        return found, cross

    def open_window(self, name: str, items: dict[int, ParsedFile], context: Context) -> Window:
        """An open window's sections without its cross-rank ones (`build_report`'s
        `waiting`): found anew each time, never kept (its files are still arriving). Its
        cross-rank facts, if known (`prime`), are kept for the report that gives them."""
        self._cross.touch(_key(items))
        with self.exact([item.result for item in items.values()], False):
            return _window(name, items, context, None, self.sketch)

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

        def find() -> CrossRank:
            results = {rank: item.result for rank, item in items.items()}
            if chain is None:
                return crossrank.window(results, _infos(items))
            return _chained(results, _infos(items), chain)

        return self._cross.get(key, find)

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
        if not clocked or len(crosses) == 1:
            return found
        clocks = crossrank.merge_clocks([cross.clocks for cross in crosses])
        return dataclass_replace(found, clocks=clocks)

    def crossed(self, cross: CrossRank, peak_Bps: float | None, plots: bool) -> CrossSections:
        """`cross_sections`, reused while the run's pooled facts are the very same (`pooled`
        gives the same object while no window was added: a report mid-window)."""
        known = self._crossed
        if known is not None and known[0] is cross and known[1] == (peak_Bps, plots):
            return known[2]
        found = cross_sections(cross, peak_Bps, plots)
        self._crossed = (cross, (peak_Bps, plots), found)
        return found

    def links(
        self, cross: CrossRank | None, given: tuple[object, ...], find: Callable[[], Links]
    ) -> Links:
        """`find()`: the run's `hosts.links`, reused while its pooled facts are the very same
        (as `crossed`) and the rest it reads (`given`) equal."""
        known = self._links
        if known is not None and known[0] is cross and known[1] == given:
            return known[2]
        found = find()
        self._links = (cross, given, found)
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
        key = _key(items) if chain is None else (*_key(items), *chain.key())
        return self._cross_facts(items, key, chain)

    def keep(self, names: Iterable[str]) -> None:
        """Forget the windows not in `names` and the cross-rank facts no window used since the
        last call."""
        wanted = set(names)
        self._sections = {k: v for k, v in self._sections.items() if k in wanted}
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


@dataclass(frozen=True)
class Chain:
    """An NCCL Inspector window's neighbours in its matching (`straddle`): the facts of the
    window before (what it took), and the next window's files."""

    before: CrossRank | None
    after: dict[int, ParsedFile]

    def key(self) -> tuple[object, ...]:
        return ("chain", self.before, *_key(self.after))


def _chained(
    results: dict[int, RankResult], infos: dict[int, crossrank.RankInfo], chain: Chain
) -> CrossRank:
    """`crossrank.window` over the calls `straddle.lent` gives the window."""
    given = chain.before.taken if chain.before is not None else frozenset()
    after = {rank: item.result.calls for rank, item in chain.after.items()}
    own = {rank: result.calls for rank, result in results.items()}
    calls, taken = straddle.lent(own, after, given)
    lent = {rank: replace(result, calls=calls[rank]) for rank, result in results.items()}
    return dataclass_replace(crossrank.window(lent, infos), taken=taken)


def by_rank(parsed: Sequence[ParsedFile]) -> dict[int, ParsedFile]:
    """One window's files by rank, as the report places them."""
    placed, _ = assign_ranks(parsed)
    return {rank: item for (_, rank), item in sorted(placed.items())}


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


def _window(
    name: str,
    items: dict[int, ParsedFile],
    context: Context,
    cross: CrossRank | None,
    sketcher: Sketcher,
) -> Window:
    results = {rank: item.result for rank, item in items.items()}
    found = _with_cross(sections(results, context), cross, context)
    found.health = health.check(items.values(), found)
    splits = cross.split if cross is not None else {}
    kept = {
        str(rank): facts.of(item.meta, item.stats, item.result, sketcher, splits.get(rank))
        for rank, item in items.items()
    }
    return Window(name=name, **asdict(found), facts=kept)


def build_report(
    windows: Sequence[str],
    parsed: Sequence[ParsedFile],
    skipped: Sequence[Skipped],
    options: Options,
    cache: WindowCache | None = None,
    *,
    waiting: Collection[str] = (),
    metrics_only: bool = False,
    placement: ranks.Placement[ParsedFile] | None = None,
) -> Report:
    """The report over these files. `waiting`: windows still open (a live report mid-window),
    whose cross-rank sections are left out, here and in the run's (which then cover the
    other windows), as `inputs.open_windows` says. `metrics_only`: a report for the live /metrics
    alone (the aggregator's mid-run reports): every window as it is, but of the run only the
    sections /metrics reads (`sections.metrics_sections`, the cross-rank ones without plots), no
    health and no diagnosis; the final report gives every one. `placement`: `parsed` placed at
    their ranks (`ranks.assign`), when the caller found it already."""
    placement = ranks.assign(parsed) if placement is None else placement
    placed, conflicts = placement.placed, placement.skipped
    metas = [item.meta for item in placed.values()]
    world = max((m.world_size for m in metas if m.world_size), default=None)
    world = world if world is not None else (len({rank for _, rank in placed}) or None)
    config = options.config or JobConfig()
    batch, batch_reason = global_batch(config, world)
    run_config = _run_config(metas, world, config, batch, options)
    context = _context(
        run_config,
        config,
        batch=batch,
        batch_reason=batch_reason,
        world=world,
        options=options,
        sources={m.source for m in metas},
    )
    by_window: dict[str, dict[int, ParsedFile]] = {name: {} for name in windows}
    for (window, rank), item in sorted(placed.items()):
        by_window[window][rank] = item
    cache = cache or WindowCache()
    waiting = [name for name in by_window if name in waiting and by_window[name]]
    window_list, crosses = _windows(by_window, context, cache, waiting)
    run = _run(by_window, crosses, context, cache, metrics_only)
    if not metrics_only:
        run.health = health.check(placed.values(), run)
    report = Report(
        world_size=world,
        config=run_config,
        windows=window_list,
        inputs=replace(
            _inputs(parsed, [*skipped, *conflicts], placement.notes, cache.file_counts),
            open_windows=waiting,
        ),
        diagnosis=Diagnosis() if metrics_only else diagnose(run, run_config),
        **asdict(run),
        links=_links(placed, crosses, context, options, cache),
    )
    return inspector_sources.labelled(report, metas)


def _links(
    placed: dict[tuple[str, int], ParsedFile],
    crosses: Sequence[CrossRank],
    context: Context,
    options: Options,
    cache: WindowCache,
) -> Links:
    """The intra- vs inter-node section over the run's pooled cross-rank facts (`hosts`)."""
    metas = [(rank, item.meta) for (_, rank), item in sorted(placed.items())]
    cross = cache.pooled(crosses, clocked=False) if crosses else None
    intra = (context.peak_Bps, context.peak_source or "")
    found = hosts.rank_hosts(metas, options.hosts)
    given = (found, intra, options.net_peak_Bps, context.world_size)
    return cache.links(cross, given, lambda: hosts.links(cross, *given))


def _run(
    by_window: dict[str, dict[int, ParsedFile]],
    crosses: Sequence[CrossRank],
    context: Context,
    cache: WindowCache,
    metrics_only: bool,
) -> Sections:
    """The run's sections, over each rank's windows merged and the windows' cross-rank facts
    pooled; `metrics_only`: those /metrics reads (`build_report`), over counts and sums alone."""
    per_rank: dict[int, list[RankResult]] = {}
    for items in by_window.values():
        for rank, item in items.items():
            per_rank.setdefault(rank, []).append(item.result)
    cross = cache.pooled(crosses, clocked=not metrics_only) if crosses else None
    if metrics_only:
        sums = {rank: cache.merged(results, samples=False) for rank, results in per_rank.items()}
        return _with_cross(metrics_sections(sums, context), cross, context, cache=cache)
    found = sections(_merged(per_rank, cache), context, cache.sketch)
    return _with_cross(found, cross, context, plots=True, cache=cache)


def _windows(
    by_window: dict[str, dict[int, ParsedFile]],
    context: Context,
    cache: WindowCache,
    waiting: Collection[str] = (),
) -> tuple[list[Window], list[CrossRank]]:
    """Each window's sections and cross-rank facts (from the cache while unchanged); those
    `waiting` without their cross-rank facts, and so those of NCCL Inspector windows after a
    waiting one (each leaves out what the one before took: `straddle`)."""
    window_list, crosses = [], []
    after = chained(by_window)
    before: CrossRank | None = None
    held = False  # the window before, of the same log folder, is waiting
    for name, items in by_window.items():
        nxt = after.get(name)  # None: not an Inspector window; "": the last of its folder
        if name in waiting or (held and nxt is not None):
            window_list.append(cache.open_window(name, items, context))
            held = bool(nxt)
        elif items:
            chain = Chain(before, by_window.get(nxt, {})) if nxt is not None else None
            found, cross = cache.window(name, items, context, chain)
            window_list.append(found)
            crosses.append(cross)
            before, held = (cross if nxt else None), False
    cache.keep(by_window)
    return window_list, crosses


def chained(by_window: dict[str, dict[int, ParsedFile]]) -> dict[str, str]:
    """Each NCCL Inspector window's next (`straddle.successors`): those whose matching takes
    instances split by a boundary whole."""
    return straddle.successors(
        [
            name
            for name, items in by_window.items()
            if is_window(name) and _inspector(items.values())
        ]
    )


def _inspector(items: Iterable[ParsedFile]) -> bool:
    return all(item.meta.source == INSPECTOR_LOGS for item in items)


def _merged(per_rank: dict[int, list[RankResult]], cache: WindowCache) -> dict[int, RankResult]:
    """Each rank's windows merged. A rank of one window has its exact samples in the run, read
    within `cache.exact` (every report reads them)."""
    alone = [results[0] for results in per_rank.values() if len(results) == 1]
    with cache.exact(alone, True):
        return {
            rank: merge_results(results) if len(results) == 1 else cache.merged(results)
            for rank, results in per_rank.items()
        }


def _infos(items: dict[int, ParsedFile]) -> dict[int, crossrank.RankInfo]:
    return {
        rank: crossrank.RankInfo(
            base_ns=item.meta.base_time_ns or 0,
            pg_ranks=item.meta.pg_ranks,
            call_starts=item.meta.call_starts,
        )
        for rank, item in items.items()
    }


def _with_cross(
    found: Sections,
    cross: crossrank.CrossRank | None,
    context: Context,
    plots: bool = False,
    cache: WindowCache | None = None,
) -> Sections:
    """`found` with the cross-rank sections; `plots`: with the points the HTML report plots
    (the whole run's only, bounded by `crossrank.PLOT_POINTS` and `PLOT_FITS`); `cache`: the
    run's, reused while its pooled facts are unchanged (`WindowCache.crossed`)."""
    if cross is None:
        return found
    peak = context.peak_Bps
    fits, skewed = (
        cache.crossed(cross, peak, plots) if cache else cross_sections(cross, peak, plots)
    )
    found = with_split(found, cross.split)
    return replace(
        found, matching=cross.matching, clocks=cross.clocks, skew=skewed, alpha_beta=fits
    )


def cross_sections(cross: CrossRank, peak_Bps: float | None, plots: bool) -> CrossSections:
    """The α-β fits and the skew section over cross-rank facts (`plots`: with their points)."""
    fits = crossrank.alpha_beta(cross, peak_Bps)
    fits = crossrank.with_points(fits, cross) if plots else fits
    return fits, skew.section(cross.arrivals, crossrank.PLOT_POINTS if plots else 0)


def _context(
    run_config: RunConfig,
    config: JobConfig,
    *,
    batch: int | None,
    batch_reason: str | None,
    world: int | None,
    options: Options,
    sources: Collection[str] = (),
) -> Context:
    gpu = run_config.gpu_name
    peak, peak_source = peak_bandwidth(gpu, options.peak_override_Bps, sources)
    fpt, fpt_source = _flops(config, options)
    flops_peak, flops_peak_source = peak_flops(gpu, options.peak_flops_override, sources)
    factor, factor_reason = _hfu(config, options)
    return Context(
        world_size=world,
        peak_Bps=peak,
        peak_source=peak_source,
        global_batch=batch,
        seq_len=config.seq_len,
        batch_reason=batch_reason,
        flops_per_token=fpt,
        flops_source=fpt_source,
        peak_flops=flops_peak,
        peak_flops_source=flops_peak_source,
        hfu_factor=factor,
        hfu_reason=factor_reason,
    )


def _hfu(config: JobConfig, options: Options) -> tuple[float | None, str]:
    """The recomputation factor from the config's [activation_checkpoint]; without any config
    (file or checkpoint settings) it is unknown, never TorchTitan's default taken on trust."""
    given = config.activation_checkpoint is not None or config.selective_ac_option is not None
    if options.config_path is None and not given:
        return None, "activation checkpointing unknown without a config (give --config)"
    return hfu_factor(config.activation_checkpoint, config.selective_ac_option)


def _flops(config: JobConfig, options: Options) -> tuple[float | None, str]:
    """FLOPs per token: --flops-per-token, else 6N + 12·L·D·S from --params or the flavor."""
    if options.flops_per_token is not None:
        return options.flops_per_token, "--flops-per-token"
    shape = model_shape(config.model, config.flavor)
    params = options.params if options.params is not None else shape.params if shape else None
    if params is None:
        what = " ".join(x for x in (config.model, config.flavor) if x)
        known = f"no parameter count for {what}" if what else "no model in the config"
        return None, f"{known}; give --params or --flops-per-token"
    return flops_per_token(
        params, shape.layers if shape else None, shape.dim if shape else None, config.seq_len
    )


def _run_config(
    metas: Sequence[TraceMeta],
    world: int | None,
    config: JobConfig,
    batch: int | None,
    options: Options,
) -> RunConfig:
    found = resolve(config, world) if options.config else None
    issue = found.issue if found else None
    return RunConfig(
        model=config.model,
        flavor=config.flavor,
        local_batch_size=config.local_batch_size,
        global_batch_size=batch,
        seq_len=config.seq_len,
        parallelism=found.degrees if found else {},
        gpu_name=_most_common(m.gpu_name for m in metas),
        backend=_most_common(m.backend for m in metas),
        config_path=options.config_path,
        warnings=[*config.warnings, *([issue] if issue else [])],
        parallelism_source=found.sources if found and found.degrees else {},
        parallelism_issue=issue,
    )


@dataclass(frozen=True)
class FileCounts:
    """What `_inputs` counts of some files (a window's, in `WindowCache.file_counts`)."""

    paths: frozenset[str]
    bytes_read: int
    events: int
    dropped: Counter[str]
    sizes_unknown: int
    notes: list[str]
    sources: Counter[str]


def file_counts(used: Sequence[ParsedFile]) -> FileCounts:
    dropped: Counter[str] = Counter()
    for item in used:
        dropped.update(item.stats.dropped)
    return FileCounts(
        paths=frozenset(p.path for p in used),
        bytes_read=sum(p.stats.bytes_read for p in used),
        events=sum(p.stats.events for p in used),
        dropped=dropped,
        sizes_unknown=sum(p.stats.sizes_unknown for p in used),
        notes=[f"{p.path}: {p.note}" for p in used if p.note],
        sources=Counter(p.meta.source for p in used),
    )


def _inputs(
    parsed: Sequence[ParsedFile],
    skipped: Sequence[Skipped],
    notes: Sequence[str] = (),
    counted: Callable[[Sequence[ParsedFile]], FileCounts] = file_counts,
) -> Inputs:
    """Counts over the files that were used (a parsed file may still be skipped later), each
    window's files counted by `counted` (`WindowCache.file_counts`: once while the same)."""
    bad = {s.path for s in skipped}
    parts = []
    for _, group in groupby(parsed, attrgetter("window")):
        items = tuple(group)
        part = counted(items)
        if not bad.isdisjoint(part.paths):
            part = file_counts([p for p in items if p.path not in bad])
        parts.append(part)
    dropped: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    for part in parts:
        dropped.update(part.dropped)
        sources.update(part.sources)
    return Inputs(
        files=len(frozenset().union(*(part.paths for part in parts)) | bad),
        skipped=sorted(skipped, key=lambda s: s.path),
        bytes_read=sum(part.bytes_read for part in parts),
        events=sum(part.events for part in parts),
        dropped_events=dict(sorted(dropped.items())),
        sizes_unknown=sum(part.sizes_unknown for part in parts),
        notes=[*notes, *dict.fromkeys(note for part in parts for note in part.notes)],
        sources=dict(sorted(sources.items())),
    )


def _most_common(values: Iterable[str | None]) -> str | None:
    counts = Counter(v for v in values if v)
    return counts.most_common(1)[0][0] if counts else None
