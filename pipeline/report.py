"""Assembling the report document from parsed files (pure).

Each parsed file is one rank's view of one window. Ranks come from `distributedInfo.rank`,
else from the file name; two files claiming one rank in one window are both skipped, each
reason naming the other. The run's sections use each rank's windows merged; its cross-rank
sections pool the windows' matched collectives (each window's clocks aligned on their own).
The files are those of one job (`jobs` tells a folder's jobs apart); `ranks` places them.
`build_report` finds every part anew; `assemble` is the same with each part found by a
`_Parts` (`reuse.WindowCache` reuses those of earlier reports: the live aggregator's).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from dataclasses import replace as dataclass_replace
from itertools import groupby
from operator import attrgetter
from typing import Literal, Protocol

from commscope.model.inspector import is_window
from commscope.model.schema import (
    INSPECTOR_LOGS,
    AlphaBeta,
    Diagnosis,
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
    alltoallv,
    crossrank,
    facts,
    health,
    hosts,
    inspector_sources,
    nics,
    ranks,
    skew,
    stages,
    straddle,
    tail,
)
from commscope.pipeline.accumulate import Sketcher, bandwidth_sketch, merge_results
from commscope.pipeline.config import DEFAULT_SOURCE, JobConfig, global_batch, resolve
from commscope.pipeline.crossrank import CrossRank
from commscope.pipeline.diagnosis import diagnose
from commscope.pipeline.flops import flops_per_token, hfu_factor, model_shape, peak_flops
from commscope.pipeline.parsed import ParsedFile as _Parsed
from commscope.pipeline.sections import (
    Context,
    metrics_sections,
    peak_bandwidth,
    sections,
    with_split,
)
from msgspec.structs import asdict, replace

ParsedFile = _Parsed  # at home in `parsed` (a worker makes them); its importers name it here
CrossSections = tuple[dict[str, dict[str, AlphaBeta]], Skew]  # α-β fits, skew (`cross_sections`)


@dataclass(frozen=True)
class Options:
    config: JobConfig | None = None
    config_path: str | None = None
    peak_override_Bps: float | None = None
    flops_per_token: float | None = None
    params: int | None = None
    peak_flops_override: float | None = None
    # what one report covers beyond its files: the files skipped already; the windows still
    # open (a live report mid-window), whose cross-rank sections are left out, here and in the
    # run's (which then cover the other windows), as `inputs.open_windows` says; a report for
    # the live /metrics alone (`metrics_only`: the aggregator's mid-run reports): every window
    # as it is, but of the run only the sections /metrics reads (`sections.metrics_sections`,
    # the cross-rank ones without plots), no health and no diagnosis; the files placed at their
    # ranks (`ranks.assign`), when the caller found it already
    skipped: Sequence[Skipped] = ()
    waiting: Collection[str] = frozenset()
    metrics_only: bool = False
    placement: ranks.Placement[ParsedFile] | None = None
    hosts: dict[int, str] | None = None  # --hosts: rank -> host (`hosts.parse_hosts`)
    net_peak_Bps: float | None = None  # --net-peak: the inter-node link's peak per direction


def _assign_ranks(
    parsed: Iterable[ParsedFile],
) -> tuple[dict[tuple[str, int], ParsedFile], list[Skipped]]:
    """Files keyed by (window, rank), and the files that could not be placed (`ranks`)."""
    placement = ranks.assign(parsed)
    return placement.placed, placement.skipped


@dataclass(frozen=True)
class Chain:
    """An NCCL Inspector window's neighbours in its matching (`straddle`): the facts of the
    window before (what it took), and the next window's files."""

    before: CrossRank | None
    after: dict[int, ParsedFile]


def window_facts(items: dict[int, ParsedFile], chain: Chain | None = None) -> CrossRank:
    """A window's cross-rank facts; `chain`: an NCCL Inspector window's neighbours
    (`straddle`): its matching leaves out what the window before took and takes the next
    window's members of its split instances."""
    results = {rank: item.result for rank, item in items.items()}
    if chain is None:
        return crossrank.window(results, rank_infos(items))
    given = chain.before.taken if chain.before is not None else frozenset()
    after = {rank: item.result.calls for rank, item in chain.after.items()}
    own = {rank: result.calls for rank, result in results.items()}
    calls, taken = straddle.lent(own, after, given)
    lent = {rank: replace(result, calls=calls[rank]) for rank, result in results.items()}
    return dataclass_replace(crossrank.window(lent, rank_infos(items)), taken=taken)


# what `hosts.links` reads besides the pooled facts: (the ranks' hosts and what gave each,
# the GPU link's peak and its source, the network's (`nics.net_peak`), the world size)
LinksGiven = tuple[
    tuple[dict[int, str], dict[int, str]],
    tuple[float | None, str],
    tuple[float | None, str],
    int | None,
]


class _Parts(Protocol):
    """How `assemble` finds each part of a report: `_Fresh` finds every one anew,
    `reuse.WindowCache` reuses those of earlier reports. Each method gives what the
    function its docstring names gives."""

    def sketch(self, tally: OpTally, which: Literal["algbw", "busbw"]) -> Sketch:
        """`accumulate.bandwidth_sketch`."""

    def exact(self, results: Sequence[RankResult], again: bool) -> AbstractContextManager[object]:
        """The context in which the report reads these results' exact bandwidth samples;
        `again`: the next report will read them too."""

    def window(
        self, name: str, items: dict[int, ParsedFile], context: Context, chain: Chain | None
    ) -> tuple[Window, CrossRank]:
        """`window_sections` and `window_facts` of a complete window."""

    def open_window(self, name: str, items: dict[int, ParsedFile], context: Context) -> Window:
        """`window_sections` of an open window, without its cross-rank ones."""

    def merged(self, results: Sequence[RankResult], samples: bool = True) -> RankResult:
        """`accumulate.merge_results`."""

    def pooled(self, crosses: Sequence[CrossRank], clocked: bool = True) -> CrossRank:
        """`crossrank.pooled`."""

    def crossed(self, cross: CrossRank, peak_Bps: float | None, plots: bool) -> CrossSections:
        """`cross_sections`."""

    def links(self, cross: CrossRank | None, given: LinksGiven) -> Links:
        """`hosts.links(cross, *given)`."""

    def linked(self, window: Window, cross: CrossRank, given: LinksGiven) -> Window:
        """`with_links`."""

    def file_counts(self, items: Sequence[ParsedFile]) -> FileCounts:
        """`file_counts`."""

    def keep(self, names: Iterable[str]) -> None:
        """The report is over the windows `names` (what to keep for the next one)."""


class _Fresh:
    """Every part of a report found anew (`build_report`)."""

    sketch = staticmethod(bandwidth_sketch)

    def __init__(self) -> None:
        self._pool: tuple[Sequence[CrossRank], CrossRank] | None = None  # (windows, unclocked)

    def exact(self, results: Sequence[RankResult], again: bool) -> AbstractContextManager[object]:
        return nullcontext()

    def window(
        self, name: str, items: dict[int, ParsedFile], context: Context, chain: Chain | None
    ) -> tuple[Window, CrossRank]:
        cross = window_facts(items, chain)
        return window_sections(name, items, context, cross, bandwidth_sketch), cross

    def open_window(self, name: str, items: dict[int, ParsedFile], context: Context) -> Window:
        return window_sections(name, items, context, None, bandwidth_sketch)

    def merged(self, results: Sequence[RankResult], samples: bool = True) -> RankResult:
        return merge_results(results, samples=samples)

    def pooled(self, crosses: Sequence[CrossRank], clocked: bool = True) -> CrossRank:
        """Pooled once a report (the run's sections and its links ask with the same list),
        the clocks added when `clocked` (`crossrank.with_clocks`)."""
        if self._pool is None or self._pool[0] is not crosses:
            self._pool = (crosses, crossrank.pooled(crosses, clocked=False))
        return crossrank.with_clocks(self._pool[1], crosses) if clocked else self._pool[1]

    def crossed(self, cross: CrossRank, peak_Bps: float | None, plots: bool) -> CrossSections:
        return cross_sections(cross, peak_Bps, plots)

    def links(self, cross: CrossRank | None, given: LinksGiven) -> Links:
        return hosts.links(cross, *given)

    def linked(self, window: Window, cross: CrossRank, given: LinksGiven) -> Window:
        return with_links(window, cross, given)

    def file_counts(self, items: Sequence[ParsedFile]) -> FileCounts:
        return file_counts(items)

    def keep(self, names: Iterable[str]) -> None:
        pass


def by_rank(parsed: Sequence[ParsedFile]) -> dict[int, ParsedFile]:
    """One window's files by rank, as the report places them."""
    placed, _ = _assign_ranks(parsed)
    return {rank: item for (_, rank), item in sorted(placed.items())}


def window_sections(
    name: str,
    items: dict[int, ParsedFile],
    context: Context,
    cross: CrossRank | None,
    sketcher: Sketcher,
) -> Window:
    """One window's sections (`cross`: its cross-rank facts; None: left out, an open window)."""
    results = {rank: item.result for rank, item in items.items()}
    found = _with_cross(sections(results, context), cross, context, cross_sections)
    found.health = health.check(items.values(), found)
    splits = cross.split if cross is not None else {}
    calls = cross.alltoall_calls if cross is not None else {}
    kept = {
        str(rank): facts.of(
            item.meta, item.stats, item.result, sketcher, splits.get(rank), alltoall=calls.get(rank)
        )
        for rank, item in items.items()
    }
    return Window(name=name, **asdict(found), facts=kept)


def build_report(windows: Sequence[str], parsed: Sequence[ParsedFile], options: Options) -> Report:
    """The report over these files (`Options` says what else it covers)."""
    return assemble(windows, parsed, options, _Fresh())


def assemble(
    windows: Sequence[str], parsed: Sequence[ParsedFile], options: Options, parts: _Parts
) -> Report:
    """`build_report`, each part found by `parts`."""
    placement = ranks.assign(parsed) if options.placement is None else options.placement
    placed = placement.placed
    metas = [item.meta for item in placed.values()]
    world, run_config, context = _setting(placed, metas, options)
    by_window: dict[str, dict[int, ParsedFile]] = {name: {} for name in windows}
    for (window, rank), item in sorted(placed.items()):
        by_window[window][rank] = item
    waiting = [name for name in by_window if name in options.waiting and by_window[name]]
    window_list, crossed = _windows(by_window, context, parts, waiting)
    crosses = list(crossed.values())
    metrics_only = options.metrics_only
    run = _run(by_window, crosses, context, parts, metrics_only)
    if not metrics_only:
        run.health = health.check(placed.values(), run)
    skipped = [*options.skipped, *placement.skipped]
    inputs = _inputs(parsed, skipped, placement.notes, parts.file_counts)
    given = _links_given(placed, context, options)
    window_list = [
        parts.linked(w, crossed[w.name], given) if w.name in crossed else w for w in window_list
    ]
    report = Report(
        world_size=world,
        config=run_config,
        windows=window_list,
        inputs=replace(inputs, open_windows=waiting),
        diagnosis=Diagnosis() if metrics_only else diagnose(run, run_config),
        **asdict(run),
        links=parts.links(parts.pooled(crosses, clocked=False) if crosses else None, given),
        profile_tails=tail.report_tails(
            ((r, i.result, i.meta.base_time_ns or 0) for (_, r), i in placed.items()), run.clocks
        ),
    )
    return inspector_sources.labelled(report, metas)


def _links_given(
    placed: dict[tuple[str, int], ParsedFile], context: Context, options: Options
) -> LinksGiven:
    """What the intra- vs inter-node sections read besides the cross-rank facts (`hosts`): the
    run's hosts, the GPU link's peak, the network's, the world size."""
    metas = [(rank, item.meta) for (_, rank), item in sorted(placed.items())]
    named = hosts.named_hosts((rank, item.path) for (_, rank), item in sorted(placed.items()))
    found = hosts.rank_hosts(metas, options.hosts, named)
    intra = (context.peak_Bps, context.peak_source or "")
    net = nics.net_peak(options.net_peak_Bps, (meta.nics for _, meta in metas))
    return found, intra, net, context.world_size


def with_links(window: Window, cross: CrossRank, given: LinksGiven) -> Window:
    """The window with its own intra- vs inter-node section (`hosts.links` of its cross-rank
    facts, the run's hosts and peaks)."""
    return replace(window, links=hosts.links(cross, *given))


def _setting(
    placed: dict[tuple[str, int], ParsedFile], metas: Sequence[TraceMeta], options: Options
) -> tuple[int | None, RunConfig, Context]:
    """The run's world size, its configuration and the context its sections are found in."""
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
    return world, run_config, context


def _run(
    by_window: dict[str, dict[int, ParsedFile]],
    crosses: Sequence[CrossRank],
    context: Context,
    parts: _Parts,
    metrics_only: bool,
) -> Sections:
    """The run's sections, over each rank's windows merged and the windows' cross-rank facts
    pooled; `metrics_only`: those /metrics reads (`build_report`), over counts and sums alone."""
    per_rank: dict[int, list[RankResult]] = {}
    for items in by_window.values():
        for rank, item in items.items():
            per_rank.setdefault(rank, []).append(item.result)
    cross = parts.pooled(crosses, clocked=not metrics_only) if crosses else None
    if metrics_only:
        sums = {rank: parts.merged(results, samples=False) for rank, results in per_rank.items()}
        return _with_cross(metrics_sections(sums, context), cross, context, parts.crossed)
    found = sections(_merged(per_rank, parts), context, parts.sketch)
    return _with_cross(found, cross, context, parts.crossed, plots=True)


def _windows(
    by_window: dict[str, dict[int, ParsedFile]],
    context: Context,
    parts: _Parts,
    waiting: Collection[str] = (),
) -> tuple[list[Window], dict[str, CrossRank]]:
    """Each window's sections and cross-rank facts; those
    `waiting` without their cross-rank facts, and so those of NCCL Inspector windows after a
    waiting one (each leaves out what the one before took: `straddle`)."""
    window_list: list[Window] = []
    crosses: dict[str, CrossRank] = {}
    after = _chained(by_window)
    before: CrossRank | None = None
    held = False  # the window before, of the same log folder, is waiting
    for name, items in by_window.items():
        nxt = after.get(name)  # None: not an Inspector window; "": the last of its folder
        if name in waiting or (held and nxt is not None):
            window_list.append(parts.open_window(name, items, context))
            held = bool(nxt)
        elif items:
            chain = Chain(before, by_window.get(nxt, {})) if nxt is not None else None
            found, cross = parts.window(name, items, context, chain)
            window_list.append(found)
            crosses[name] = cross
            before, held = (cross if nxt else None), False
    parts.keep(by_window)
    return window_list, crosses


def _chained(by_window: dict[str, dict[int, ParsedFile]]) -> dict[str, str]:
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


def _merged(per_rank: dict[int, list[RankResult]], parts: _Parts) -> dict[int, RankResult]:
    """Each rank's windows merged. A rank of one window has its exact samples in the run, read
    within `parts.exact` (every report reads them)."""
    alone = [results[0] for results in per_rank.values() if len(results) == 1]
    with parts.exact(alone, True):
        return {
            rank: merge_results(results) if len(results) == 1 else parts.merged(results)
            for rank, results in per_rank.items()
        }


def rank_infos(items: dict[int, ParsedFile]) -> dict[int, crossrank.RankInfo]:
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
    crossed: Callable[[CrossRank, float | None, bool], CrossSections],
    plots: bool = False,
) -> Sections:
    """`found` with the cross-rank sections, found by `crossed` (`cross_sections`); `plots`:
    with the points the HTML report plots (the whole run's only, bounded by
    `crossrank.PLOT_POINTS` and `PLOT_FITS`)."""
    if cross is None:
        return found
    fits, skewed = crossed(cross, context.peak_Bps, plots)
    found = with_split(found, cross.split)
    return replace(
        found,
        matching=cross.matching,
        clocks=cross.clocks,
        skew=skewed,
        alpha_beta=fits,
        alltoallv=alltoallv.section(cross.alltoallv),
        pipeline=stages.section(
            cross.pipeline, context.pp_degree, context.world_size, context.pp_schedule
        ),
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
        pp_degree=_given(run_config, "pipeline_parallel_degree"),
        pp_schedule=config.pp_schedule,
    )


def _given(run_config: RunConfig, degree: str) -> int | None:
    """A degree the config file gave (not TorchTitan's default)."""
    if run_config.parallelism_source.get(degree, DEFAULT_SOURCE) == DEFAULT_SOURCE:
        return None
    return run_config.parallelism.get(degree)


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
    """What `_inputs` counts of some files (a window's: `_Parts.file_counts`)."""

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
    window's files counted by `counted` (`_Parts.file_counts`)."""
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
