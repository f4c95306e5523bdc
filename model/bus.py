"""The contract's bus-traffic factor F per collective type and group size n (pure).

Bus bytes = message size x F, the nccl-tests convention (PERFORMANCE.md): F = 2(n-1)/n for
all-reduce, (n-1)/n for all-gather, reduce-scatter and all-to-all, 1 for the rest.
"""

from __future__ import annotations

from typing import Final

# Bus-traffic factor F per collective type for group size n (nccl-tests PERFORMANCE.md).
_TWO_WAY: Final = frozenset({"AllReduce"})
_ONE_WAY: Final = frozenset({"AllGather", "ReduceScatter", "AllToAll"})


def bus_fraction(collective: str, group_size: int | None) -> tuple[int, int] | None:
    """F as an exact fraction (numerator, denominator); None when it needs an unknown n."""
    if collective in _TWO_WAY or collective in _ONE_WAY:
        if group_size is None or group_size < 1:
            return None
        return (2 if collective in _TWO_WAY else 1) * (group_size - 1), group_size
    return 1, 1


def bus_factor(collective: str, group_size: int | None) -> float | None:
    """F with bus bytes = S x F (nccl-tests); None when F depends on an unknown group size."""
    fraction = bus_fraction(collective, group_size)
    return None if fraction is None else fraction[0] / fraction[1]
