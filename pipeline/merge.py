"""Shard reports combined into one report (`commscope merge`, pure).

Each shard (an aggregator owning some nodes, or `commscope report` on some of the ranks)
writes a JSON report whose windows carry every rank's facts (`pipeline.facts`). Merging
places each (window, rank) from its shard and runs `sections` over all of them: every figure
per rank and over ranks is the one `commscope report` gives on all the files, bit for bit —
except bandwidth medians and p95 over ranks of several shards, which come from the ranks'
sketches (within 1%, labelled); per-rank rows are the shards' own. A window (or the run)
that one shard holds whole is taken from it as it is.

The cross-rank analysis was made within each shard, and so was each rank's exposed split
into transfer, waiting and unmatched (a rank two shards hold keeps the split of more matched
time). The merged report keeps, per process
group, the matching and α-β fits of the groups whose traced members all lie in one shard, as
that shard found them; a group across shards is named and not analysed. The all-to-all-v
section is made again from every rank's all-to-all calls (`alltoallv.tally`), as the report on
every file makes it. Clock offsets and
arrival skew pool every group a shard saw (and each shard's offsets are relative to its own
lowest rank): they are kept only when one shard holds every matched group, whole. The
intra- vs inter-node section pools the groups inside one shard (`linkmerge`).

Refused (`MergeError`, one line): reports of different jobs (world size, backend, GPU),
schema versions or report options, a report without facts, and a rank's window reported by
two shards with different numbers; `check_distinct`: one shard given twice.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

import msgspec
from commscope.model.errors import MergeError
from commscope.model.names import window_order
from commscope.model.schema import (
    SCHEMA_VERSION,
    Clocks,
    CollectiveStats,
    Inputs,
    Links,
    Matching,
    MergeInfo,
    RankFacts,
    Report,
    Sections,
    Shard,
    Skew,
    Window,
)
from commscope.pipeline import alltoallv, facts, health, linkmerge, tail, waiting
from commscope.pipeline.accumulate import merge_results
from commscope.pipeline.diagnosis import diagnose
from commscope.pipeline.matching import MAX_DESYNCS, group_order
from commscope.pipeline.sections import Context, sections, with_split
from msgspec.structs import asdict, replace

NOT_ACROSS: Final = (
    "not analysed across shards: each shard's clock offsets are relative to its own lowest "
    "rank, and its arrival skew pools every group it saw"
)
MAX_NAMED: Final = 8  # groups across shards named in a note (all are in `groups_across`)
_PER_RANK: Final = (
    "Per rank and over ranks (throughput, overlap, network, traffic, collectives, kernels, "
    "step-time stragglers): exact, from the shards' per-rank facts; bandwidth medians "
    "and p95 over ranks of several shards from sketches (within 1%, marked ~)"
)
_ALLTOALLV: Final = (
    "All-to-all-v: exact, each rank's all-to-all calls (from its facts) matched again over "
    "every shard's ranks"
)


@dataclass(frozen=True)
class Placed:
    """One rank's window: the shard it came from, its facts, and its shard's row for it."""

    shard: int
    facts: RankFacts
    row: dict[str, CollectiveStats]


@dataclass
class _Cover:
    """Which shards hold which ranks (for one window, or the run), and each shard's view."""

    owners: dict[int, set[int]] = field(default_factory=dict)  # rank -> shards
    views: dict[int, Sections] = field(default_factory=dict)  # shard -> its sections


def combine(named: Sequence[tuple[str, Report]]) -> Report:
    """The merged report of shard reports (MergeError when they cannot be merged)."""
    if not named:
        raise MergeError("nothing to merge")
    for name, report in named:
        _check_version(name, report)
    _check_one_job(named)
    parts = sorted(named, key=lambda p: (min(p[1].ranks, default=-1), p[0]))
    reports = [report for _, report in parts]
    context = _context(reports)
    names = sorted({w.name for r in reports for w in r.windows}, key=window_order)
    placed = {name: _place(name, parts) for name in names}
    tally = functools.cache(lambda name: _alltoallv(placed[name]))  # each window's, once
    windows = [_window(name, placed[name], reports, context, tally) for name in names]
    closed = [name for name in names if all(name not in r.inputs.open_windows for r in reports)]
    run, info = _run(placed, names, reports, context)
    run.alltoallv = alltoallv.section(alltoallv.pooled([tally(n) for n in closed]))
    info.shards = [_shard(path, report) for path, report in parts]
    return Report(
        world_size=reports[0].world_size,
        config=reports[0].config,
        windows=windows,
        inputs=_inputs(
            [r.inputs for r in reports], [i for name in names for i in placed[name].values()]
        ),
        diagnosis=diagnose(run, reports[0].config),
        merge=info,
        **asdict(run),
        links=_links(reports, info),
        profile_tails=tail.report_tails(_tails(placed), run.clocks),
    )


def _tails(placed: Mapping[str, Mapping[int, Placed]]) -> Iterable[tail.Placed]:
    """Each rank's windows as `tail.report_tails` reads them (from its facts)."""
    for items in placed.values():
        for rank, item in items.items():
            yield rank, item.facts.result, item.facts.meta.base_time_ns or 0


def _links(reports: Sequence[Report], info: MergeInfo) -> Links | None:
    """The intra- vs inter-node section: the one shard's, else the groups inside one shard
    pooled (`linkmerge`)."""
    if len(reports) == 1:
        return reports[0].links
    return linkmerge.merged(dict(enumerate(r.links for r in reports)), info.groups_inside)


# ---------------------------------------------------------------- refusals


def check_distinct(named: Sequence[tuple[str, Report]]) -> None:
    """MergeError when one shard is given twice (the same file, or the same report but for
    its provenance: `commscope merge` refuses it; `combine` alone counts it once)."""
    seen: dict[bytes, str] = {}
    for name, report in named:
        digest = msgspec.json.encode(replace(report, provenance=None))
        if digest in seen:
            raise MergeError(f"{name}: the same shard as {seen[digest]} (given twice)")
        seen[digest] = name


def _check_version(name: str, report: Report) -> None:
    if report.schema_version != SCHEMA_VERSION:
        why = "older" if report.schema_version < SCHEMA_VERSION else "newer"
        raise MergeError(
            f"{name}: schema version {report.schema_version}, this commscope merges "
            f"{SCHEMA_VERSION} ({why}); run this commscope's `commscope report` on its traces"
        )
    for window in report.windows:
        missing = sorted(set(window.ranks) - {int(r) for r in window.facts})
        if missing:
            raise MergeError(f"{name}: window {window.name} carries no facts for ranks {missing}")


def _check_one_job(named: Sequence[tuple[str, Report]]) -> None:
    """One job, reported with one set of options (what the sections need beyond the ranks)."""
    first_name, first = named[0]
    for name, report in named[1:]:
        for what, a, b in (
            ("world size", first.world_size, report.world_size),
            ("backend", first.config.backend, report.config.backend),
            ("GPU", first.config.gpu_name, report.config.gpu_name),
        ):
            if a != b:
                raise MergeError(
                    f"{first_name} and {name} are different jobs ({what} {a} against {b})"
                )
        if _options(first) != _options(report):
            raise MergeError(
                f"{first_name} and {name} were reported with different options (batch, sequence "
                "length, FLOPs, peaks or config): report every shard with the same ones"
            )


def _options(report: Report) -> Context:
    return replace(_own_context(report), batch_reason=None)


def _own_context(report: Report) -> Context:
    t, n, u = report.throughput, report.network, report.utilization
    reason = t.na_reason if t.global_batch_size is None and t.iteration_time_s is not None else None
    return Context(
        world_size=report.world_size,
        peak_Bps=n.peak_bandwidth_Bps,
        peak_source=n.peak_source,
        global_batch=t.global_batch_size,
        seq_len=t.seq_len,
        batch_reason=reason,
        flops_per_token=u.flops_per_token,
        flops_source=u.flops_source,
        peak_flops=u.peak_flops,
        peak_flops_source=u.peak_source,
        hfu_factor=u.hfu_factor,
        hfu_reason=u.hfu_reason,
    )


def _context(reports: Sequence[Report]) -> Context:
    """The shards' common context; why the batch is unknown from a shard that had steps."""
    found = [_own_context(r) for r in reports]
    reasons = [c.batch_reason for c in found if c.batch_reason is not None]
    return replace(found[0], batch_reason=reasons[0] if reasons else None)


def _place(name: str, parts: Sequence[tuple[str, Report]]) -> dict[int, Placed]:
    """Each rank of window `name` from its shard; one rank from two shards must agree."""
    placed: dict[int, Placed] = {}
    for index, (path, report) in enumerate(parts):
        for window in report.windows:
            if window.name != name:
                continue
            for rank_key, rank_facts in window.facts.items():
                rank = int(rank_key)
                row = window.collectives.per_rank.get(rank_key, {})
                item = Placed(index, rank_facts, row)
                seen = placed.setdefault(rank, item)
                if seen is item:
                    continue
                if _own(seen.facts) != _own(rank_facts) or seen.row != row:
                    raise MergeError(
                        f"rank {rank} of window {name} is in {parts[seen.shard][0]} and {path} "
                        "with different numbers"
                    )
                if _matched(rank_facts.split) > _matched(seen.facts.split):
                    placed[rank] = Placed(seen.shard, rank_facts, seen.row)
    return dict(sorted(placed.items()))


def _own(found: RankFacts) -> RankFacts:
    """A rank's facts but for its exposed split, which depends on the ranks its shard held."""
    return replace(found, split=None)


def _matched(split: waiting.Split | None) -> tuple[int, ...]:
    """Of a rank's splits from two shards, the one of most matched time (then the largest
    fields: order-free)."""
    if split is None:
        return (-1,)
    return (split.transfer_ns + split.waiting_ns, *asdict(split).values())


# ---------------------------------------------------------------- windows and the run


def _window(
    name: str,
    placed: Mapping[int, Placed],
    reports: Sequence[Report],
    context: Context,
    tally: Callable[[str], alltoallv.Tally],
) -> Window:
    sole = _sole(placed.values())
    if sole >= 0:
        return next(w for w in reports[sole].windows if w.name == name)
    cover = _Cover()
    for rank, item in placed.items():
        cover.owners.setdefault(rank, set()).add(item.shard)
    for index, report in enumerate(reports):
        for window in report.windows:
            if window.name == name:
                cover.views[index] = window
    found = _sections(placed, {r: p.row for r, p in placed.items()}, context)
    found, info = _cross(found, cover)
    found.alltoallv = alltoallv.section(tally(name))
    found.health = health.check([facts.file(p.facts) for p in placed.values()], found)
    kept = {str(rank): item.facts for rank, item in placed.items()}
    links = linkmerge.merged(_window_links(cover), info.groups_inside)
    return Window(name=name, **asdict(found), facts=kept, links=links)


def _window_links(cover: _Cover) -> dict[int, Links | None]:
    return {shard: view.links for shard, view in cover.views.items() if isinstance(view, Window)}


def _alltoallv(placed: Mapping[int, Placed]) -> alltoallv.Tally:
    """A window's all-to-all-v tally over its ranks' calls, whichever shards gave them."""
    calls = {r: p.facts.alltoallv for r, p in placed.items() if p.facts.alltoallv is not None}
    return alltoallv.tally(calls, placed)


def _sole(items: Iterable[Placed]) -> int:
    """The one shard every item comes from, else -1."""
    shards = {item.shard for item in items}
    return shards.pop() if len(shards) == 1 else -1


def _sections(
    placed: Mapping[int, Placed],
    rows: Mapping[int, dict[str, CollectiveStats] | None],
    context: Context,
) -> Sections:
    """Sections over the placed ranks; each rank's collective row its shard's where given."""
    results = {rank: facts.result(item.facts) for rank, item in placed.items()}
    found = with_split(sections(results, context), _splits({r: [p] for r, p in placed.items()}))
    return _with_rows(found, rows)


def _splits(items: Mapping[int, Sequence[Placed]]) -> dict[int, waiting.Split]:
    """Each rank's exposed split (its shard's, `pipeline.waiting`) summed over the windows
    that have one."""
    return waiting.pooled(
        [{r: i.facts.split} for r, found in items.items() for i in found if i.facts.split]
    )


def _with_rows(found: Sections, rows: Mapping[int, dict[str, CollectiveStats] | None]) -> Sections:
    per_rank = dict(found.collectives.per_rank)
    per_rank.update({str(rank): row for rank, row in rows.items() if row is not None})
    found.collectives = replace(found.collectives, per_rank=per_rank)
    return found


def _run(
    placed: Mapping[str, Mapping[int, Placed]],
    names: Sequence[str],
    reports: Sequence[Report],
    context: Context,
) -> tuple[Sections, MergeInfo]:
    every = [item for name in names for item in placed[name].values()]
    if len(reports) == 1 or _sole(every) >= 0:
        only = reports[max(_sole(every), 0)]
        return Sections(**{k: getattr(only, k) for k in Sections.__struct_fields__}), MergeInfo(
            groups_inside={g: max(_sole(every), 0) for g in only.matching.groups},
            notes=["One shard holds every rank: its report is taken as it is"],
        )
    by_rank: dict[int, list[Placed]] = {}
    for name in names:
        for rank, item in placed[name].items():
            by_rank.setdefault(rank, []).append(item)
    results = {
        r: merge_results(facts.result(i.facts) for i in items) for r, items in by_rank.items()
    }
    rows = {r: _run_row(items, reports, r) for r, items in by_rank.items()}
    found = with_split(sections(dict(sorted(results.items())), context), _splits(by_rank))
    found = _with_rows(found, rows)
    cover = _Cover(
        owners={r: {i.shard for i in items} for r, items in by_rank.items()},
        views=dict(enumerate(reports)),
    )
    found, info = _cross(found, cover)
    found.health = health.check([facts.file(i.facts) for i in every], found)
    return found, info


def _run_row(
    items: Sequence[Placed], reports: Sequence[Report], rank: int
) -> dict[str, CollectiveStats] | None:
    """The rank's whole-run row from its shard, when one shard holds every window of it."""
    shard = _sole(items)
    return reports[shard].collectives.per_rank.get(str(rank)) if shard >= 0 else None


# ---------------------------------------------------------------- cross-rank sections


def _cross(found: Sections, cover: _Cover) -> tuple[Sections, MergeInfo]:
    """Matching and α-β of the groups inside one shard; clocks and skew when one shard holds
    every matched group, whole."""
    inside, across = _groups(cover)
    info = MergeInfo(groups_inside=inside, groups_across=across)
    views = cover.views
    found.matching = _matching(inside, views)
    found.alpha_beta = {
        group: views[shard].alpha_beta[group]
        for group, shard in sorted(inside.items(), key=lambda g: group_order(g[0]))
        if group in views[shard].alpha_beta
    }
    holders = {shard for shard, view in views.items() if view.matching.groups}
    sole = holders.pop() if len(holders) == 1 and not across else None
    if sole is not None:
        found.clocks, found.skew = views[sole].clocks, views[sole].skew
    else:
        found.clocks, found.skew = Clocks(method=NOT_ACROSS), Skew(evidence=NOT_ACROSS)
    info.notes = [_PER_RANK, _ALLTOALLV, *_notes(inside, across, sole)]
    return found, info


def _groups(cover: _Cover) -> tuple[dict[str, int], dict[str, list[int]]]:
    """Each process group a shard matched: the one shard holding its traced members, or the
    shards across which they lie."""
    touching: dict[str, set[int]] = {}
    for shard, view in cover.views.items():
        for group, stats in view.matching.groups.items():
            into = touching.setdefault(group, set())
            into.add(shard)
            for rank in stats.members:
                into.update(cover.owners.get(rank, ()))
    ordered = sorted(touching, key=group_order)
    inside = {g: next(iter(touching[g])) for g in ordered if len(touching[g]) == 1}
    across = {g: sorted(touching[g]) for g in ordered if len(touching[g]) > 1}
    return inside, across


def _matching(inside: Mapping[str, int], views: Mapping[int, Sections]) -> Matching:
    groups = {g: views[shard].matching.groups[g] for g, shard in inside.items()}
    desyncs = [
        d for view in views.values() for d in view.matching.desyncs if d.process_group in inside
    ]
    return Matching(
        instances=sum(g.instances for g in groups.values()),
        by_seq=sum(g.instances for g in groups.values() if g.key == "seq"),
        by_index=sum(g.instances for g in groups.values() if g.key != "seq"),
        unmatched=sum(g.unmatched for g in groups.values()),
        point_to_point=sum(view.matching.point_to_point for view in views.values()),
        desync_count=sum(g.desyncs for g in groups.values()),
        desyncs=desyncs[:MAX_DESYNCS],
        groups=groups,
    )


def _notes(
    inside: Mapping[str, int], across: Mapping[str, list[int]], sole: int | None
) -> list[str]:
    kept = (
        f"the {len(inside)} process group(s) inside one shard, as that shard analysed them"
        if inside
        else "none (no process group lies inside one shard)"
    )
    notes = [f"Matching and α-β fits: {kept}"]
    if across:
        names = ", ".join(list(across)[:MAX_NAMED]) + (", …" if len(across) > MAX_NAMED else "")
        notes.append(
            f"Not analysed: {len(across)} process group(s) across shards ({names}): their "
            "members' calls were never matched together"
        )
    if sole is None:
        notes.append(f"Clock offsets and arrival skew: {NOT_ACROSS}")
    else:
        notes.append(f"Clock offsets and arrival skew: shard {sole + 1}'s (it holds every group)")
    return notes


# ---------------------------------------------------------------- inputs and shards


def _inputs(parts: Sequence[Inputs], used: Sequence[Placed]) -> Inputs:
    """The files analysed (each placed rank's window once, however many shards gave it) and
    those the shards skipped or ignored; counts from the analysed files' own counters; a
    window still open in any shard (a mid-run report's) is open in the merge."""
    skipped = sorted({s for part in parts for s in part.skipped}, key=lambda s: (s.path, s.reason))
    dropped: Counter[str] = Counter()
    for item in used:
        dropped.update(item.facts.stats.dropped)
    return Inputs(
        files=len(used) + len({s.path for s in skipped}),
        skipped=skipped,
        bytes_read=sum(item.facts.stats.bytes_read for item in used),
        events=sum(item.facts.stats.events for item in used),
        dropped_events=dict(sorted(dropped.items())),
        sizes_unknown=sum(item.facts.stats.sizes_unknown for item in used),
        ignored=sorted({path for part in parts for path in part.ignored}),
        notes=sorted({note for part in parts for note in part.notes}),
        sources=dict(sorted(Counter(item.facts.meta.source for item in used).items())),
        open_windows=sorted({name for part in parts for name in part.open_windows}),
    )


def _shard(path: str, report: Report) -> Shard:
    return Shard(path=path, ranks=list(report.ranks), windows=[w.name for w in report.windows])
