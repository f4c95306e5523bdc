"""Interleaved, looped and V schedules: several (virtual) stages per rank (pure).

With p pipeline ranks and v stages each (p·v stages), TorchTitan's `stage_ids_this_rank`
places them by the schedule's style: looped (Interleaved1F1B, LoopedBFS,
InterleavedZeroBubble) gives the rank at position r the stages r, r + p, …, r + (v − 1)p;
V (ZBVZeroBubble, DualPipeV; v = 2) gives r and 2p − 1 − r. TorchTitan gives multi-stage
schedules v = 2 unless `pipeline_parallel_layers_per_stage` says otherwise.

From the P2P pattern alone, a looped schedule's forward edges form one cycle: each rank sends
activations to its successor, v·m a step (m microbatches), and at the loop's end rank p − 1
sends to rank 0 for the next virtual stage, (v − 1)·m a step. So the edge with the fewest
forward sends is the wrap, its receiver is at position 0, and v = n / (n − n_wrap) with n the
other edges' count (all equal, else not a loop).

The bubble a balanced schedule implies, as a share of a rank's compute:

    GPipe, 1F1B                     (p − 1)/m      Huang et al. 2019 (GPipe, arXiv:1811.06965);
                                                   Narayanan et al. 2021 (arXiv:2104.04473)
    Interleaved1F1B, LoopedBFS      (p − 1)/(v·m)  Narayanan et al. 2021 §2.2.2 (interleaved);
                                                   Lamy-Poirier 2022 (arXiv:2211.05953, looped)
    InterleavedZeroBubble, ZBV      ≈ 0            Qi et al. 2023 (arXiv:2401.10241, 2405.15362)
    DualPipeV, anything else        unknown        (its bubble depends on F, B, W times)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

_LOOP: Final = frozenset({"interleaved1f1b", "loopedbfs", "interleavedzerobubble"})
_V: Final = frozenset({"zbvzerobubble", "dualpipev"})
_SINGLE: Final = frozenset({"gpipe", "1f1b"})
_INTERLEAVED: Final = frozenset({"interleaved1f1b", "loopedbfs"})
_ZERO: Final = frozenset({"interleavedzerobubble", "zbvzerobubble"})
DEFAULT_V: Final = 2  # TorchTitan's stages per rank of a multi-stage schedule


def style_of(schedule: str | None) -> str | None:
    """ "loop" or "v" for a multi-stage schedule's name, None for a single-stage one."""
    name = (schedule or "").lower()
    return "loop" if name in _LOOP else "v" if name in _V else None


def rank_stages(position: int, ranks: int, per_rank: int, style: str | None) -> list[int]:
    """The stages of the rank at `position` of `ranks` pipeline ranks (TorchTitan's
    `stage_ids_this_rank`)."""
    if style == "v":
        return [position, 2 * ranks - 1 - position]
    return [position + s * ranks for s in range(per_rank)]


def bubble_fraction(
    schedule: str | None, ranks: int, per_rank: int, micro: float
) -> tuple[float | None, str]:
    """(the schedule bubble as a share of compute, its formula and source); None: unknown."""
    name = (schedule or "gpipe").lower()
    if name in _SINGLE:
        return (
            ranks - 1
        ) / micro, "(p-1)/m (GPipe, 1F1B: Huang et al. 2019, Narayanan et al. 2021)"
    if name in _INTERLEAVED:
        return (ranks - 1) / (per_rank * micro), (
            "(p-1)/(v*m) (interleaved: Narayanan et al. 2021 §2.2.2; looped: Lamy-Poirier 2022)"
        )
    if name in _ZERO:
        return 0.0, "~0 (zero bubble: Qi et al. 2023)"
    return None, f"unknown for {schedule}"


def looped(edges: Mapping[tuple[int, int], int]) -> tuple[dict[int, int], int] | None:
    """(rank -> position, v) when the forward edges (-> their sends) form one looped cycle."""
    outs = {a: b for a, b in edges}
    if len(edges) < 3 or len(outs) != len(edges) or len({b for _, b in edges}) != len(edges):
        return None
    wrap = min(sorted(edges), key=lambda e: edges[e])
    others = {n for e, n in edges.items() if e != wrap}
    if len(others) != 1 or (n := others.pop()) <= edges[wrap]:
        return None
    per_rank, left = divmod(n, n - edges[wrap])
    positions: dict[int, int] = {}
    rank = wrap[1]
    while rank not in positions:
        positions[rank] = len(positions)
        rank = outs.get(rank, rank)
    if left or per_rank < 2 or len(positions) != len(edges) or rank != wrap[1]:
        return None
    return positions, per_rank
