"""Synthetic multi-rank collectives with known clock offsets, arrival skew and a slow rank.

Instance i starts around `i * period_ns`. Rank r arrives at that time plus a uniform jitter,
plus `late_ns` if it is the slow rank; the collective ends for every member at the last
arrival plus its wait-free time α + S·F/β (plus `end_noise_ns` of noise per rank). Each
rank writes its times on its own clock: true time + its offset. Everything is returned per
rank as the CommOps its trace would give.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from commscope.model.bus import bus_factor
from commscope.model.schema import CommOp, Event, RankResult
from commscope.pipeline.accumulate import Accumulator


@dataclass(frozen=True)
class Scenario:
    ranks: int = 4
    instances: int = 40
    offsets_ns: Mapping[int, int] = field(default_factory=dict)
    slow_rank: int | None = None
    late_ns: int = 0
    jitter_ns: int = 50_000
    end_noise_ns: int = 0
    sizes: Sequence[int] = (1 << 20,)
    alpha_s: float = 20e-6
    beta_Bps: float = 100e9
    collective: str = "AllReduce"
    group: str | None = "0"
    with_seq: bool = True
    period_ns: int = 10_000_000
    seed: int = 0


@dataclass
class Truth:
    """What the analysis should find: per instance the last arriver and the skew (ns)."""

    last: list[int] = field(default_factory=list)
    skew_ns: list[int] = field(default_factory=list)


def calls(s: Scenario) -> tuple[dict[int, list[CommOp]], Truth]:
    rng = random.Random(s.seed)
    out: dict[int, list[CommOp]] = {r: [] for r in range(s.ranks)}
    truth = Truth()
    for i in range(s.instances):
        size = s.sizes[i % len(s.sizes)]
        arrive = {r: i * s.period_ns + rng.randrange(s.jitter_ns + 1) for r in range(s.ranks)}
        if s.slow_rank is not None:
            arrive[s.slow_rank] += s.late_ns
        last = max(arrive.values())
        truth.last.append(max(arrive, key=lambda r: (arrive[r], -r)))
        truth.skew_ns.append(last - min(arrive.values()))
        factor = bus_factor(s.collective, s.ranks) or 1.0
        work = round((s.alpha_s + size * factor / s.beta_Bps) * 1e9)
        for rank, start in arrive.items():
            end = last + work + rng.randrange(s.end_noise_ns + 1)
            shift = s.offsets_ns.get(rank, 0)
            seq = i if s.with_seq else None
            op = CommOp(s.collective, start + shift, end - start, size, s.ranks, True, s.group, seq)
            out[rank].append(op)
    return out, truth


def results(per_rank: Mapping[int, Sequence[Event]]) -> dict[int, RankResult]:
    """Each rank's calls through the real Accumulator (as the collector's events would go)."""
    found = {}
    for rank, ops in per_rank.items():
        accumulator = Accumulator()
        accumulator.add_all(ops)
        found[rank] = accumulator.result()
    return found
