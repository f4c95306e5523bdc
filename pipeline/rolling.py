"""Rolling bandwidth statistics per key over a time horizon, in bounded memory (pure).

`RollingBandwidth` keeps, per key (collective type), the values (bytes/s) added during the last
`horizon_s` seconds and answers count, mean and quantiles over them. No clock is read: every
call takes `now_s` (monotonic seconds). The instance keeps one clock, the latest finite `now_s`
seen by any call; an earlier or non-finite `now_s` means that latest time (values added before
any finite time is known are rejected).

Time is cut into slots [k * slot_s, (k + 1) * slot_s). A value added at time t goes into slot
k = floor(t / slot_s) and stays in the horizon at time `now` while its slot overlaps
(now - horizon_s, now], i.e. while k >= floor((now - horizon_s) / slot_s), and while k is among
the newest `max_slots` = ceil(horizon_s / slot_s) + 1 slot indices up to floor(now / slot_s). In
exact arithmetic the first condition implies the second; the second only bites when rounding in
t / slot_s would keep one slot more, and it makes `max_slots` a hard bound on a key's ring. The
horizon is honoured to within one slot: a value counts for at least `horizon_s` and less than
`horizon_s + slot_s` seconds (up to rounding at slot edges).

A slot holds a sparse histogram over log-scale buckets (bucket of v = floor(log v / log GAMMA),
GAMMA = 2**(1/16), buckets ~4.4 % wide) with fixed indices covering [1, 1e15] B/s plus an
underflow and an overflow bucket, and the exact count, sum, minimum and maximum of its values.
Memory is therefore at most keys x `max_slots` x `BUCKETS` counters, whatever the run length.
A value that is not finite or not positive is not binned but counted in `rejected`.

`quantile` estimates numpy's default (linear interpolation between closest ranks) quantile of
the values in the horizon: each of the two ranks bracketing q * (n - 1) stands for the
geometric midpoint of its bucket (the exact minimum and maximum for the first and last ranks,
and for the underflow and overflow buckets), and the interpolated result is clamped to the
observed [minimum, maximum]. Guarantee, for values within [1, 1e15]: the estimate lies within a
factor GAMMA of the exact quantile, hence within [lo / GAMMA, hi * GAMMA] where lo and hi are
the exact order statistics bracketing it (about 4.4 % relative error; the bucket width alone
would give sqrt(GAMMA), the rest is slack for rounding). q = 0 and q = 1 give the exact minimum
and maximum, and a sample of one repeated value gives exactly that value. Outside [1, 1e15] the
estimate is only known to lie within the observed [minimum, maximum]. `count` is exact and
`mean` is the mean of the values in the horizon up to float rounding of the sums.
"""

from __future__ import annotations

import math
from bisect import bisect_right
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Final, NamedTuple

GAMMA: Final = 2.0 ** (1 / 16)
_LOG_GAMMA: Final = math.log(GAMMA)
TOP: Final = math.ceil(math.log(1e15) / _LOG_GAMMA)  # buckets 0..TOP-1 cover [1, GAMMA**TOP)
UPPER: Final = GAMMA**TOP  # ~1.03e15: the lowest value of the overflow bucket
UNDERFLOW: Final = -1
OVERFLOW: Final = TOP
BUCKETS: Final = TOP + 2  # the most distinct buckets a slot (or a whole window) can hold
_MAX_SLOTS: Final = 100_000  # horizon_s / slot_s above this is a configuration error


def bucket(value: float) -> int:
    """The log-scale bucket of a positive finite value (UNDERFLOW below 1, OVERFLOW from UPPER)."""
    if value < 1.0:
        return UNDERFLOW
    if value >= UPPER:
        return OVERFLOW
    return min(math.floor(math.log(value) / _LOG_GAMMA), TOP - 1)


def representative(index: int) -> float:
    """Geometric midpoint of an in-range bucket: GAMMA ** (index + 1/2)."""
    return math.pow(GAMMA, index + 0.5)


def _binnable(value: float) -> bool:
    """Whether a value is a bandwidth the histogram takes: finite and positive."""
    return math.isfinite(value) and value > 0


@dataclass(slots=True)
class _Slot:
    """The values of one key added during one slot of time."""

    index: int
    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    total: float = 0.0
    low: float = math.inf
    high: float = -math.inf

    def extend(self, values: Sequence[float]) -> None:
        counts = self.counts
        for value in values:
            index = bucket(value)
            counts[index] = counts.get(index, 0) + 1
        self.count += len(values)
        self.total += sum(values)
        self.low = min(self.low, *values)
        self.high = max(self.high, *values)


class _Window(NamedTuple):
    """The union of a key's live slots, as a sorted histogram."""

    indices: list[int]
    cumulative: list[int]
    low: float
    high: float

    @classmethod
    def of(cls, ring: Iterable[_Slot]) -> _Window:
        counts: dict[int, int] = {}
        low, high = math.inf, -math.inf
        for slot in ring:
            for index, n in slot.counts.items():
                counts[index] = counts.get(index, 0) + n
            low, high = min(low, slot.low), max(high, slot.high)
        indices = sorted(counts)
        return cls(indices, list(accumulate(counts[i] for i in indices)), low, high)

    def value_at(self, rank: int) -> float:
        """The stand-in for the value of 0-based ascending rank `rank`."""
        if rank == 0:
            return self.low
        if rank == self.cumulative[-1] - 1:
            return self.high
        index = self.indices[bisect_right(self.cumulative, rank)]
        if index == UNDERFLOW:
            return self.low
        return self.high if index == OVERFLOW else representative(index)

    def quantile(self, q: float) -> float:
        position = q * (self.cumulative[-1] - 1)
        low_rank = math.floor(position)
        high_rank = min(low_rank + 1, self.cumulative[-1] - 1)
        low, high = self.value_at(low_rank), self.value_at(high_rank)
        estimate = low + (high - low) * (position - low_rank)
        return min(max(estimate, self.low), self.high)


class _Footprint(NamedTuple):
    """What a `RollingBandwidth` stores: slots over all keys and bucket counters over all slots."""

    slots: int
    buckets: int


def _positive(name: str, value: float) -> float:
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive finite number of seconds, got {value!r}")
    return value


class RollingBandwidth:
    """Per-key rolling count, mean and quantiles of bandwidths; see the module docstring."""

    __slots__ = ("_now_s", "_rings", "horizon_s", "max_slots", "rejected", "slot_s")

    def __init__(self, horizon_s: float = 600.0, slot_s: float | None = None) -> None:
        self.horizon_s = _positive("horizon_s", horizon_s)
        self.slot_s = _positive("slot_s", horizon_s / 60 if slot_s is None else slot_s)
        if not horizon_s / self.slot_s <= _MAX_SLOTS:
            raise ValueError(f"horizon_s / slot_s must be at most {_MAX_SLOTS}")
        self.max_slots = math.ceil(horizon_s / self.slot_s) + 1
        self.rejected = 0
        self._now_s = -math.inf
        self._rings: dict[str, deque[_Slot]] = {}

    def add(self, key: str, values: Iterable[float], now_s: float) -> None:
        """Add `values` (bytes/s) under `key` at time `now_s`; count the unusable in `rejected`."""
        known = self._advance(now_s)
        accepted = []
        for value in values:
            if known and _binnable(value):
                accepted.append(value)
            else:
                self.rejected += 1
        if accepted:
            self._current(key).extend(accepted)

    def count(self, key: str, now_s: float) -> int:
        """How many values of `key` are inside the horizon."""
        self._advance(now_s)
        return sum(slot.count for slot in self._rings.get(key, ()))

    def mean(self, key: str, now_s: float) -> float | None:
        """Mean of the values of `key` inside the horizon (None when there are none)."""
        self._advance(now_s)
        ring = self._rings.get(key)
        if not ring:
            return None
        return sum(slot.total for slot in ring) / sum(slot.count for slot in ring)

    def quantile(self, key: str, q: float, now_s: float) -> float | None:
        """Estimated q-quantile (0 <= q <= 1) of the values of `key` inside the horizon."""
        if not 0.0 <= q <= 1.0:
            raise ValueError(f"q must lie in [0, 1], got {q!r}")
        self._advance(now_s)
        ring = self._rings.get(key)
        return _Window.of(ring).quantile(q) if ring else None

    def keys(self) -> list[str]:
        """Keys with values inside the horizon at the latest time seen, sorted."""
        return sorted(self._rings)

    def footprint(self) -> _Footprint:
        """Slots and bucket counters currently stored, over all keys."""
        slots = [slot for ring in self._rings.values() for slot in ring]
        return _Footprint(len(slots), sum(len(slot.counts) for slot in slots))

    def _slot(self, t: float) -> int:
        return math.floor(t / self.slot_s)

    def _usable(self, now_s: float) -> bool:
        """Whether `now_s` maps to slots without overflow (false for NaN and infinities)."""
        return math.isfinite(now_s / self.slot_s) and math.isfinite(
            (now_s - self.horizon_s) / self.slot_s
        )

    def _advance(self, now_s: float) -> bool:
        """Move the clock forward to `now_s` and expire; False while no time is known."""
        if now_s > self._now_s and self._usable(now_s):
            self._now_s = now_s
            self._expire()
        return self._now_s > -math.inf

    def _expire(self) -> None:
        now_s = self._now_s
        oldest = max(self._slot(now_s - self.horizon_s), self._slot(now_s) - self.max_slots + 1)
        for key, ring in list(self._rings.items()):
            while ring and ring[0].index < oldest:
                ring.popleft()
            if not ring:
                del self._rings[key]

    def _current(self, key: str) -> _Slot:
        index = self._slot(self._now_s)
        ring = self._rings.setdefault(key, deque())
        if not ring or ring[-1].index != index:
            ring.append(_Slot(index))
        return ring[-1]
