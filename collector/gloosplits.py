"""The split sizes of gloo's all-to-all calls (pure).

gloo's `gloo:all_to_all` span (on a gloo worker thread) records only its input's shape. The
c10d op that issued it, `c10d::alltoall_base_(output, input, group, output_split_sizes,
input_split_sizes, …)` on the training thread, holds the split sizes in `Concrete Inputs`
(rows of dimension 0, as PyTorch's `computeLengthsAndOffsets` reads them). A file's spans and
calls are paired at its end in start order (a process group's work runs in the order it was
issued), all or none: only when they are as many and each span starts after its call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from commscope.collector.classify import split_sizes
from commscope.collector.ncclsplits import whole
from msgspec.structs import replace

_ALLTOALL_CALL: Final = "c10d::alltoall_base_"
# the ops a gloo all-to-all span runs (the list form, `c10d::alltoall_`, records no splits)
_ISSUING: Final = frozenset({_ALLTOALL_CALL, "c10d::alltoall_"})
_GLOO_SPAN: Final = "gloo:all_to_all"
_MEMORY: Final = 65_536  # spans (and calls) held per file; past it none is paired
_OUTPUT_SPLITS, _INPUT_SPLITS = 3, 4  # positions in `Concrete Inputs`


def call_splits(name: str, args: Mapping[str, Any]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(sent, received) split sizes a call records: `In split size` / `Out split size` (a
    record_param_comms' whole lists where they were cut: `ncclsplits.whole`), else a
    `c10d::alltoall_base_`'s `Concrete Inputs`."""
    recorded = split_sizes(args.get("In split size")), split_sizes(args.get("Out split size"))
    sent, received = whole(name, args, recorded)
    if sent or received or name != _ALLTOALL_CALL:
        return sent, received
    given = args.get("Concrete Inputs")
    if not isinstance(given, list) or len(given) <= _INPUT_SPLITS:
        return (), ()
    return split_sizes(given[_INPUT_SPLITS]), split_sizes(given[_OUTPUT_SPLITS])


class Pairing:
    """A file's gloo all-to-all spans, held to the end, and the calls that issued them."""

    def __init__(self) -> None:
        self.calls: list[Any] = []
        self.spans: list[Any] = []
        self.overflow = False

    def call(self, call: Any) -> None:
        if call.name not in _ISSUING:
            return
        if len(self.calls) >= _MEMORY:
            self.overflow = True
            return
        self.calls.append(call)

    def span(self, facts: Any) -> bool:
        """True: `facts` is held until `paired` (a gloo all-to-all span, room left)."""
        if facts.name != _GLOO_SPAN or len(self.spans) >= _MEMORY:
            self.overflow = self.overflow or facts.name == _GLOO_SPAN
            return False
        self.spans.append(facts)
        return True

    def paired(self) -> list[Any]:
        """The held spans in start order, each with its call's split sizes where they pair."""
        spans = sorted(self.spans, key=lambda s: s.start_ns)
        calls = sorted(self.calls, key=lambda c: c.start_ns)
        self.spans, self.calls = [], []
        fits = len(spans) == len(calls) and not self.overflow
        if not fits or any(s.start_ns < c.start_ns for s, c in zip(spans, calls, strict=True)):
            return spans
        return [_with_splits(span, call) for span, call in zip(spans, calls, strict=True)]


def _with_splits(span: Any, call: Any) -> Any:
    """The span with the call's split sizes and, when its input's rows give the row size,
    the message size S = row x max(Σ sent, Σ received) rows (the contract's max of in and out)."""
    if not (call.in_splits and call.out_splits):
        return span
    rows_in, rows_out = sum(call.in_splits), sum(call.out_splits)
    size = span.dims_bytes
    if size is not None and rows_in > 0 and size % rows_in == 0:
        size = size // rows_in * max(rows_in, rows_out)
    return replace(span, in_splits=call.in_splits, out_splits=call.out_splits, nelems_bytes=size)
