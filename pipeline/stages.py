"""Pipeline parallelism: each stage's compute, waiting and bubble from matched P2P pairs (pure).

Per rank, within S (the union of its profiled steps), with P its compute, E = C \\ P its
exposed communication and T the transfer union of every matched instance it is a member of
(collectives and P2P pairs, `waiting.pieces`):

    bubble              = |S \\ (P ∪ T)| = |S \\ P| - |S ∩ E ∩ T|   (neither computing nor moving)
    waiting, activations = |(S ∩ E ∩ W_act) \\ T|     W_act: its receives' waiting on a sender
                                                      of the stage before it
    waiting, gradients  = |(S ∩ E ∩ W_grad) \\ (T ∪ W_act)|    (a sender of the stage after)
    waiting to send     = |(S ∩ E ∩ W_send) \\ (T ∪ W_act ∪ W_grad)|   (its sends posted before
                                                      the neighbour's receive)

The three waits are parts of the bubble. Forward is the direction of the first pair between
two neighbours in a window (activations flow before gradients). The bubble the schedule implies
is that of a balanced pipeline with the rank's own compute: (p - 1)/m x compute (GPipe, 1F1B:
p stages, m microbatches), at most the bubble; the rest is what a slow neighbour adds. The
rank the others wait for caused the most exposed waiting on P2P calls at the root: a wait on a
neighbour that was itself waiting then goes on to what that neighbour waited for (`rootcause`);
it is named only when the collectives' slow-rank test (`skew.verdict`: p ≤ 0.05 family-wise
over the ranks, each pair's late member drawn at random) finds it clear over its P2P pairs.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from commscope.model.schema import InSteps, Pipeline, PipelineRank
from commscope.model.units import duration, p_value
from commscope.pipeline import skew
from commscope.pipeline.intervals import IntervalSet, difference, intersection, union, unpacked
from commscope.pipeline.p2p import Pair
from commscope.pipeline.rootcause import root_waiting, shifted
from commscope.pipeline.virtual import DEFAULT_V, bubble_fraction, looped, rank_stages, style_of
from commscope.pipeline.waiting import Exposed, pieces

CHAIN = "P2P pattern (a chain of send->recv peers, forward = each pair's first direction)"
LOOP = "P2P pattern (one loop of send->recv peers: a looped or interleaved schedule)"
_ASSUMED = "GPipe or 1F1B assumed (no config names one)"
_MESH = "config (pipeline_parallel_degree = {p}: TorchTitan's mesh puts pp outermost)"


@dataclass
class _RankTally:
    """One rank's sums (ns, counts) over its windows: mergeable by addition."""

    span_ns: int = 0
    compute_ns: int = 0
    transfer_ns: int = 0
    bubble_ns: int = 0
    wait_act_ns: int = 0
    wait_grad_ns: int = 0
    wait_send_ns: int = 0
    waited_on: Counter[int] = field(default_factory=Counter)  # causer -> exposed waiting ns
    root_on: Counter[int] = field(default_factory=Counter)  # root causer (`rootcause`) -> ns
    pairs: int = 0
    steps: int = 0
    forward_sends: Counter[int] = field(default_factory=Counter)  # receiver -> pairs sent


@dataclass
class Tally:
    ranks: dict[int, _RankTally] = field(default_factory=dict)
    votes: Counter[tuple[int, int]] = field(default_factory=Counter)  # (a, b): a->b went first
    arrivals: skew.Tally = field(default_factory=skew.Tally)  # who came last at each pair

    def __bool__(self) -> bool:
        return bool(self.votes)


@dataclass
class _Sets:
    transfer: IntervalSet = field(default_factory=IntervalSet)
    act: IntervalSet = field(default_factory=IntervalSet)
    grad: IntervalSet = field(default_factory=IntervalSet)
    send: IntervalSet = field(default_factory=IntervalSet)
    by: dict[int, IntervalSet] = field(default_factory=dict)


@dataclass(frozen=True)
class Window:
    """What a window gives the tally besides its pairs: per rank E and S (`waiting.Exposed`),
    its in-step measures and profiled step count."""

    exposed: Mapping[int, Exposed]
    in_steps: Mapping[int, InSteps | None]
    steps: Mapping[int, int]


def first_directions(pairs: Sequence[Pair], shifts: Mapping[int, float]) -> set[tuple[int, int]]:
    """(a, b) for each neighbour pair whose first pair (aligned clocks) went a -> b."""
    first: dict[frozenset[int], tuple[float, int, int]] = {}
    for item in pairs:
        at = min(s - shifts.get(m, 0.0) for m, s in item.instance.starts.items())
        key = frozenset((item.sender, item.receiver))
        if key not in first or at < first[key][0]:
            first[key] = (at, item.sender, item.receiver)
    return {(a, b) for _, a, b in first.values()}


def window_tally(
    pairs: Sequence[Pair],
    transfer: Mapping[int, IntervalSet],
    shifts: Mapping[int, float],
    window: Window,
) -> Tally:
    """One window's tally (nothing when it has no pair). `transfer`: each rank's T over the
    window's timed collectives and `pairs` (`waiting.unions`, shared with its split; read)."""
    if not pairs:
        return Tally()
    forward = first_directions(pairs, shifts)
    sets = {rank: _Sets(transfer=transfer.get(rank, IntervalSet())) for rank in window.exposed}
    for item in pairs:
        _add_pair(sets, window, item, shifts, (item.sender, item.receiver) in forward)
    arrivals = skew.tally([skew.arrival(item.instance, shifts) for item in pairs])
    tally = Tally(votes=Counter(forward), arrivals=arrivals)
    inside = {rank: _inside(window.exposed[rank]) for rank in sets}
    direct = {rank: _direct(inside[rank], found) for rank, found in sets.items()}
    roots = root_waiting({rank: _aligned(on, _offset(window, shifts, rank))
                          for rank, on in direct.items()})  # fmt: skip
    for rank, found in sets.items():
        tally.ranks[rank] = _rank(window, rank, (inside[rank], found), pairs, forward)
        tally.ranks[rank].waited_on = Counter({c: d.measure() for c, d in direct[rank].items()})
        tally.ranks[rank].root_on = roots[rank]
    return tally


def _inside(exposed: Exposed) -> IntervalSet:
    """S ∩ E of a rank (own clock)."""
    return intersection(unpacked(exposed.exposed_runs), unpacked(exposed.step_runs))


def _direct(inside: IntervalSet, sets: _Sets) -> dict[int, IntervalSet]:
    """neighbour -> the rank's exposed in-step waiting on it, outside its transfer (own clock)."""
    return {c: difference(intersection(inside, w), sets.transfer) for c, w in sets.by.items()}


def _aligned(on: Mapping[int, IntervalSet], by: int) -> dict[int, IntervalSet]:
    return {near: shifted(waits, by) for near, waits in on.items()}


def _offset(window: Window, shifts: Mapping[int, float], rank: int) -> int:
    """What moves a rank's own clock onto the aligned one (`waiting.pieces`' clocks)."""
    return window.exposed[rank].base_ns - round(shifts.get(rank, 0.0))


def _add(
    sets: dict[int, _Sets],
    window: Window,
    member: int,
    span: tuple[int, int],
    which: Callable[[_Sets], IntervalSet],
) -> None:
    if member in sets:
        base = window.exposed[member].base_ns
        which(sets[member]).add(span[0] - base, span[1] - base)


def _add_pair(
    sets: dict[int, _Sets], window: Window, item: Pair, shifts: Mapping[int, float], ahead: bool
) -> None:
    """The receiver's waiting (activations when the pair goes forward) and the sender's
    waiting to send, each caused by the other (its transfer is in T already)."""
    for member, (wait, _) in pieces(item.instance, shifts).items():
        if member == item.receiver:
            _add(sets, window, member, wait, lambda s: s.act if ahead else s.grad)
        else:
            _add(sets, window, member, wait, lambda s: s.send)
        _add(sets, window, member, wait, _caused_by(item.receiver if member == item.sender
                                                      else item.sender))  # fmt: skip


def _caused_by(other: int) -> Callable[[_Sets], IntervalSet]:
    """The waiting set of a rank's calls with `other` (what `other` caused)."""
    return lambda s: s.by.setdefault(other, IntervalSet())


def _rank(
    window: Window,
    rank: int,
    found: tuple[IntervalSet, _Sets],
    pairs: Sequence[Pair],
    forward: set[tuple[int, int]],
) -> _RankTally:
    inside, sets = found
    moved = intersection(inside, sets.transfer).measure()
    steps = window.in_steps.get(rank) or InSteps()
    act = difference(intersection(inside, sets.act), sets.transfer)
    grad = difference(difference(intersection(inside, sets.grad), sets.transfer), act)
    waits = union([sets.transfer, sets.act, sets.grad])
    send = difference(intersection(inside, sets.send), waits)
    own = [p for p in pairs if rank in (p.sender, p.receiver)]
    return _RankTally(
        span_ns=steps.span_ns,
        compute_ns=steps.compute_ns,
        transfer_ns=moved,
        bubble_ns=max(0, steps.span_ns - steps.compute_ns - moved),
        wait_act_ns=act.measure(),
        wait_grad_ns=grad.measure(),
        wait_send_ns=send.measure(),
        pairs=len(own),
        steps=window.steps.get(rank, 0),
        forward_sends=Counter(
            p.receiver for p in own if (p.sender, p.receiver) in forward and p.sender == rank
        ),
    )


def pooled(parts: Iterable[Tally]) -> Tally:
    """A run's tally: every window's sums added."""
    total, arrivals = Tally(), []
    for part in parts:
        arrivals.append(part.arrivals)
        total.votes.update(part.votes)
        for rank, found in part.ranks.items():
            into = total.ranks.setdefault(rank, _RankTally())
            for name in ("span_ns", "compute_ns", "transfer_ns", "bubble_ns", "wait_act_ns",
                         "wait_grad_ns", "wait_send_ns", "pairs", "steps"):  # fmt: skip
                setattr(into, name, getattr(into, name) + getattr(found, name))
            into.waited_on.update(found.waited_on)
            into.root_on.update(found.root_on)
            into.forward_sends.update(found.forward_sends)
    total.arrivals = skew.pool(arrivals)
    return total


def chain_stages(votes: Mapping[tuple[int, int], int]) -> tuple[dict[int, int], str | None]:
    """Each rank's stage from the forward edges (the direction most windows saw first): one or
    more equal chains, else ({}, why not)."""
    edges = _forward(votes)
    after = {a: b for a, b in edges}
    before = {b: a for a, b in edges}
    if len(after) != len(edges) or len(before) != len(edges):
        return {}, "the P2P pattern is not a chain (a rank sends forward to two ranks)"
    stages: dict[int, int] = {}
    for start in sorted(set(after) - set(before)):
        rank: int | None = start
        stage = 0
        while rank is not None and rank not in stages:
            stages[rank], stage = stage, stage + 1
            rank = after.get(rank)
    if len(stages) != len(set(after) | set(before)):
        return {}, "the P2P pattern is a cycle (an interleaved or V schedule?): stages unknown"
    return stages, None


def _forward(votes: Mapping[tuple[int, int], int]) -> set[tuple[int, int]]:
    """The edges (a, b) more windows saw first from a to b than from b to a."""
    return {(a, b) for (a, b), n in votes.items() if n > votes.get((b, a), 0)}


def mesh_stages(ranks: Iterable[int], pp: int, world: int) -> dict[int, int]:
    """TorchTitan's mesh [pp, dp_replicate, dp_shard, cp, tp]: stage = rank // (world / pp)."""
    return {rank: rank // (world // pp) for rank in ranks}


def schedule_of(name: str | None, pp: int | None) -> str | None:
    """The schedule's name the bubble assumes: the config's, TorchTitan's default 1F1B when
    the config gives pp but no schedule, else None (GPipe or 1F1B assumed)."""
    return "1F1B" if name is None and pp is not None and pp > 1 else name


@dataclass(frozen=True)
class _Layout:
    """Each rank's position in the pipeline, where it came from, and stages per rank."""

    stages: dict[int, int]
    source: str | None
    issue: str | None
    per_rank: int = 1
    schedule: str | None = None


def _layout(tally: Tally, pp: int | None, world: int | None, schedule: str | None) -> _Layout:
    """From the config's degree when it gives one (its schedule's style and TorchTitan's
    stages per rank), else from the P2P pattern: a chain, or one looped cycle."""
    named = schedule_of(schedule, pp)
    stages, issue = chain_stages(tally.votes)
    found = _Layout(stages, CHAIN if stages else None, issue, 1, named)
    loop = None if stages else looped(_forward_edges(tally))
    if loop is not None:
        found = _Layout(loop[0], LOOP, None, loop[1], named or "Interleaved1F1B")
    if pp is not None and pp > 1 and world is not None and world % pp == 0:
        per_rank = (loop[1] if loop else DEFAULT_V) if style_of(named) else 1
        return _Layout(mesh_stages(tally.ranks, pp, world), _MESH.format(p=pp), None,
                       per_rank, named)  # fmt: skip
    return found


def _forward_edges(tally: Tally) -> dict[tuple[int, int], int]:
    """Each forward edge (a, b) -> the activation sends a made to b."""
    return {(a, b): tally.ranks[a].forward_sends[b] if a in tally.ranks else 0
            for a, b in _forward(tally.votes)}  # fmt: skip


def section(
    tally: Tally, pp: int | None = None, world: int | None = None, schedule: str | None = None
) -> Pipeline:
    """The report's pipeline section; `pp`, `world`, `schedule`: the config's degree and
    schedule name, and the world size."""
    if not tally:
        return Pipeline()
    layout = _layout(tally, pp, world, schedule)
    stages, per_rank = layout.stages, layout.per_rank
    count = max(stages.values()) + 1 if stages else None
    micro = _microbatches(tally, stages, per_rank)
    fraction, formula = None, None
    if count is not None and micro:
        fraction, formula = bubble_fraction(layout.schedule, count, per_rank, micro)
    rows = {str(r): _row(tally.ranks[r], stages.get(r), fraction)
            for r in sorted(tally.ranks) if tally.ranks[r].pairs}  # fmt: skip
    if count is not None and per_rank > 1:
        style = style_of(layout.schedule) or "loop"
        for row in rows.values():
            if row.stage is not None:
                row.virtual_stages = rank_stages(row.stage, count, per_rank, style)
    said = f"{layout.schedule} ({'config' if schedule or pp else 'assumed'})"
    found = Pipeline(stages=count, stage_source=layout.source, stage_issue=layout.issue,
                     microbatches=micro, per_rank=rows, bubble_formula=formula,
                     schedule=said if layout.schedule else _ASSUMED,
                     stages_per_rank=per_rank if stages else None)  # fmt: skip
    return _waited_for(found, tally, stages)


def _microbatches(tally: Tally, stages: Mapping[int, int], per_rank: int) -> float | None:
    """Activation sends of the first position's ranks per profiled step and stage it holds."""
    firsts = [tally.ranks[r] for r, s in stages.items() if s == 0 and r in tally.ranks]
    steps = sum(t.steps for t in firsts)
    sends = sum(sum(t.forward_sends.values()) for t in firsts)
    return sends / steps / per_rank if steps and sends else None


def _row(t: _RankTally, stage: int | None, fraction: float | None) -> PipelineRank:
    schedule = None if fraction is None else min(float(t.bubble_ns), fraction * t.compute_ns)
    return PipelineRank(
        stage=stage,
        step_span_s=t.span_ns / 1e9,
        compute_s=t.compute_ns / 1e9,
        transfer_s=t.transfer_ns / 1e9,
        bubble_s=t.bubble_ns / 1e9,
        schedule_bubble_s=None if schedule is None else schedule / 1e9,
        neighbour_bubble_s=None if schedule is None else (t.bubble_ns - schedule) / 1e9,
        waiting_activations_s=t.wait_act_ns / 1e9,
        waiting_gradients_s=t.wait_grad_ns / 1e9,
        waiting_to_send_s=t.wait_send_ns / 1e9,
        pairs=t.pairs,
    )


def _waited_for(found: Pipeline, tally: Tally, stages: Mapping[int, int]) -> Pipeline:
    """The rank that caused the most exposed waiting at the root (`rootcause`), named only
    when the collectives' slow-rank test (`skew.verdict`) finds it clear over its P2P pairs;
    beside it, the waiting each rank caused directly."""
    caused, root = Counter[int](), Counter[int]()
    for waiter in tally.ranks.values():
        caused.update(waiter.waited_on)
        root.update(waiter.root_on)
    for name, row in found.per_rank.items():
        row.caused_waiting_s = caused[int(name)] / 1e9
        row.root_caused_waiting_s = root[int(name)] / 1e9
    total = sum(root.values())
    if not total:
        return found
    rank, ns = max(sorted(root.items()), key=lambda item: item[1])
    where = f" (stage {stages[rank]})" if rank in stages else ""
    entry = tally.arrivals.per_rank[rank]
    ranks = len(tally.arrivals.per_rank)
    p, clear = skew.verdict(tally.arrivals.draws, rank, entry, ranks, ns / total)
    facts = (
        f"rank {rank}{where} arrived last at {entry.last} of its {entry.instances} matched P2P "
        f"pairs ({entry.expected_last:.1f} expected by chance) and caused at the root "
        f"{duration(ns / 1e9)} of all {duration(total / 1e9)} exposed P2P waiting "
        f"({ns / total:.0%}); {p_value(p)} that chance does this to one of {ranks} ranks"
    )
    if not clear:
        found.evidence = f"no stage stands out: {facts}"
        return found
    found.waited_for_rank, found.waited_for_stage, found.evidence = rank, stages.get(rank), facts
    return found
