"""What the model knows of NCCL Inspector logs: the evidence of a rank read from them, the
report sections they cannot fill and the names of a log's time windows (pure)."""

from __future__ import annotations

from collections.abc import Collection
from typing import Final

from commscope.model.schema import Evidence, RankResult, evidence_label
from msgspec.structs import replace

INSPECTED: Final[Evidence] = "nccl inspector"  # the evidence of a rank read from its logs
NO_COMPUTE: Final = "n/a: NCCL Inspector has no compute kernels"
_NO_STEPS: Final = "n/a: NCCL Inspector has no ProfilerStep spans"
# The report sections Inspector logs cannot fill, and why (`Source.lacks`)
LACKS: Final[dict[str, str]] = {
    **dict.fromkeys(
        ("overlap", "kernels", "utilization", "top_kernels", "launches", "graphs"), NO_COMPUTE
    ),
    **dict.fromkeys(("throughput", "steps", "stragglers"), _NO_STEPS),
    # its Send/Recv records are paired (matching: p2p_pairs); a stage's compute, bubble and
    # waiting need the compute kernels and steps it does not have
    "pipeline": "n/a: NCCL Inspector has no compute kernels or ProfilerStep spans "
    "(its P2P calls are paired: see matching)",
}


def as_result(result: RankResult) -> RankResult:
    """A rank read from Inspector logs, offline or tailed live: marked so, and with no GPU
    idle time (no compute kernels: it is unknown, not the gaps between NCCL kernels)."""
    return replace(result, evidence_text=evidence_label((INSPECTED,)), gpu_busy_ns=0, gpu_span_ns=0)


def inspected(evidence: Collection[Evidence]) -> bool:
    """Whether a rank's evidence (`RankResult.evidence`, `RankOverlap.evidence`; merged over
    windows: the union) says it was read from NCCL Inspector logs, which hold no compute
    kernels."""
    return INSPECTED in evidence


AT: Final = "@"  # between a log's folder and its window's UTC start in a window's name


def is_window(name: str) -> bool:
    """Whether a window's name is one of a log's time windows (`window_folder`)."""
    return AT in name


def log_folder(name: str) -> str:
    """The log folder a window's name belongs to (`window_folder` undone)."""
    return name.rsplit(AT, 1)[0]
