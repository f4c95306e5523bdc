"""The all-to-all-v traffic matrix as nccl-tests' alltoallv input (pure: Report → str).

nccl-tests ships no uneven all-to-all upstream; the closest documented format is that of its
alltoallv benchmark proposed in NVIDIA/nccl-tests pull request #157 (`alltoallv_perf -s FILE`):
N lines of N comma-separated fractions in [0, 1], entry i,j the share of the per-peer count
(the `-b` size / N) that rank i sends to rank j. Here the fractions are the run's matrix over its
largest entry, and the report gives `-b` (`AllToAllV.replay_bytes`: N x the largest entry of
the mean call), so `alltoallv_perf -b B -e B -s FILE` replays the mean call's traffic.
"""

from __future__ import annotations

from typing import Final

from commscope.model.report import AllToAllV

SUFFIX: Final = ".alltoallv.csv"
_DIGITS: Final = 6  # decimals of each fraction


def replay_csv(found: AllToAllV | None) -> str | None:
    """The matrix as fractions of its largest entry; None without traffic in a matrix."""
    if found is None or not found.matrix_bytes:
        return None
    largest = max(v for line in found.matrix_bytes for v in line)
    if largest == 0:
        return None
    lines = (",".join(_fraction(v, largest) for v in line) for line in found.matrix_bytes)
    return "\n".join(lines) + "\n"


def _fraction(value: int, largest: int) -> str:
    return f"{value / largest:.{_DIGITS}f}".rstrip("0").rstrip(".") or "0"


def replay_command(found: AllToAllV, file_name: str) -> str | None:
    """The nccl-tests command line that replays the mean call (None without `replay_bytes`)."""
    if found.replay_bytes is None:
        return None
    b = found.replay_bytes
    return f"alltoallv_perf -b {b} -e {b} -s {file_name}  (NVIDIA/nccl-tests PR #157)"
