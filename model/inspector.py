"""What the model knows of NCCL Inspector logs: the evidence word of a rank read from them and
the names of a log's time windows (pure)."""

from __future__ import annotations

from typing import Final

from commscope.model.schema import RankResult
from msgspec.structs import replace

SOURCE: Final = "nccl inspector"  # `RankResult.source` of a rank read from Inspector logs
NO_COMPUTE: Final = "n/a: NCCL Inspector has no compute kernels"


def as_result(result: RankResult) -> RankResult:
    """A rank read from Inspector logs, offline or tailed live: marked so, and with no GPU
    idle time (no compute kernels: it is unknown, not the gaps between NCCL kernels)."""
    return replace(result, source=SOURCE, gpu_busy_ns=0, gpu_span_ns=0)


def inspected(source: str) -> bool:
    """Whether a rank's `source` (`RankResult.source`, `RankOverlap.source`; `a + b` when merged
    over windows) says it was read from NCCL Inspector logs, which hold no compute kernels."""
    return SOURCE in source


AT: Final = "@"  # between a log's folder and its window's UTC start in a window's name


def is_window(name: str) -> bool:
    """Whether a window's name is one of a log's time windows (`window_folder`)."""
    return AT in name


def log_folder(name: str) -> str:
    """The log folder a window's name belongs to (`window_folder` undone)."""
    return name.rsplit(AT, 1)[0]
