"""Quantities in units a person reads (pure): the one formatter behind every figure commscope
prints, in the report (exporters/textfmt.py), the HTML report's plots and tooltips, and the
findings the pipeline words.

A quantity scales to the unit that keeps 1 to 999 of it and shows three significant figures
(`4.06 MB/s`, `10.2 ms`, `544 B`; a plot's round axis ticks as few as they need, `digits`),
never scientific notation: data in decimal units (1 KB = 10^3 B, MB = 10^6 B, GB = 10^9 B,
as nccl-tests counts GB/s), times in ns, µs, ms or s, bandwidth in B/s to TB/s, FLOPs in SI
prefixes. Past the largest unit the integer digits all stay (`12345 s`). "n/a" for unknown
values.
"""

from __future__ import annotations

import math
from typing import Final

_SIGNIFICANT: Final = 3
Units = tuple[tuple[float, str], ...]  # (factor, name), largest first; the last is the base

BYTES: Final[Units] = ((1e15, "PB"), (1e12, "TB"), (1e9, "GB"), (1e6, "MB"), (1e3, "KB"), (1, "B"))
RATES: Final[Units] = tuple((factor, f"{name}/s") for factor, name in BYTES)
TIMES: Final[Units] = ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns"))
FLOPS: Final[Units] = (
    (1e15, "PFLOP"), (1e12, "TFLOP"), (1e9, "GFLOP"), (1e6, "MFLOP"), (1e3, "kFLOP"), (1, "FLOP")
)  # fmt: skip
_FLOP_RATES: Final[Units] = tuple((factor, f"{name}/s") for factor, name in FLOPS)
UNITS_NOTE: Final = (
    "Units: KB, MB, GB = 10^3, 10^6, 10^9 B (decimal, as nccl-tests); GB/s = 10^9 B/s; "
    "3 significant figures"
)


def quantity(
    value: float | None, units: Units, whole_base: bool = False, digits: int = _SIGNIFICANT
) -> str:
    """`value` (in the base unit) in the unit that keeps 1 to 999 of it, `digits` significant
    figures (three; a plot's round tick values fewer, see `fewest`); `whole_base`: an integral
    value in the base unit shows no decimals (`16 B`)."""
    if value is None or not math.isfinite(value):
        return "n/a"
    if value == 0:
        return f"0 {next(name for factor, name in units if factor == 1)}"
    top, top_name = units[0]
    if abs(value) >= (1000 - 5 * 10.0 ** (2 - digits)) * top:  # rounds to 1000 of it or more:
        return f"{value / top:.0f} {top_name}"  # past the largest unit every integer digit stays
    rounded = _round(value, digits)
    factor, name = next(((f, n) for f, n in units if abs(rounded) >= f), units[-1])
    if whole_base and factor == units[-1][0] and rounded == int(rounded):
        return f"{int(rounded)} {name}"
    return f"{_digits(rounded / factor, digits)} {name}"


def fewest(value: float, most: int = _SIGNIFICANT) -> int:
    """The fewest significant figures (1 to `most`) that write `value` as `most` do: 1 for
    0.005, 2 for 0.0025, 3 for 0.0125 (a plot's tick reads `5 ms`, not `5.00 ms`)."""
    if value == 0 or not math.isfinite(value):
        return 1
    return next(d for d in range(1, most + 1) if _round(value, d) == _round(value, most))


def _round(value: float, digits: int) -> float:
    """`value` to `digits` significant figures."""
    return round(value, digits - 1 - math.floor(math.log10(abs(value))))


def _digits(value: float, digits: int) -> str:
    """A number already rounded, with as many decimals as its significant figures need."""
    magnitude = math.floor(math.log10(abs(value))) if value else 0
    return f"{value:.{max(0, digits - 1 - magnitude)}f}"


def size(value: float | None, digits: int = _SIGNIFICANT) -> str:
    """Bytes: `544 B`, `1.09 KB`, `108 MB`."""
    return quantity(value, BYTES, whole_base=True, digits=digits)


def rate(value: float | None, digits: int = _SIGNIFICANT) -> str:
    """Bytes per second: `4.06 MB/s`, `41.8 GB/s`."""
    return quantity(value, RATES, digits=digits)


def duration(value: float | None, digits: int = _SIGNIFICANT) -> str:
    """Seconds: `582 µs`, `10.2 ms`, `1.50 s`."""
    return quantity(value, TIMES, digits=digits)


def flops(value: float | None) -> str:
    return quantity(value, FLOPS, whole_base=True)


def flop_rate(value: float | None) -> str:
    return quantity(value, _FLOP_RATES)


def p_value(p: float) -> str:
    """`p = 0.02` (two significant figures), or `p < 0.0001`: never `p = 3e-09`."""
    return "p < 0.0001" if p < 1e-4 else f"p = {min(p, 1.0):.2g}"
