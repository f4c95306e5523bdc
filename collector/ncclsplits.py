"""The split sizes of NCCL jobs' all-to-all calls, as PyTorch's profiler records them (pure).

PyTorch's ProcessGroupNCCL records each call with `RECORD_PARAM_COMMS_DATA`
(torch/csrc/distributed/c10d/ParamCommsUtils.hpp); the profiler writes its facts as the
`record_param_comms` op's args and copies them to the NCCL kernel (`saveNcclMeta`):

- `all_to_all_single` with split sizes is "all_to_allv": `In`/`Out msg nelems` are the
  input's and output's numel, `In`/`Out split size` rows of dimension 0 per group rank.
- the list form `all_to_all` is "all_to_all" with splits of *elements* (each tensor's numel),
  and both `In msg nelems` and `Out msg nelems` are the input's total (ProcessGroupNCCL::
  alltoall passes `total_numel` twice): its output's total is Σ `Out split size`.
- `In`/`Out split size` are cut past 30 entries (`"[4, 2, ...]"`, `kTruncatLength`); with
  `record_shapes` the op's `Concrete Inputs` also hold the lists whole, at the places of
  `inSplitSizes` and `outSplitSizes` in its param list (input tensors, seq, process group,
  rank, collective name, in splits, out splits, global rank start, stride, world size).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from commscope.collector.classify import dtype_bytes, split_sizes

_RECORD: Final = "record_param_comms"
_IN_SPLITS, _OUT_SPLITS = 5, 6  # places in record_param_comms' `Concrete Inputs`
_LIST_FORM: Final = "all_to_all"  # with split sizes: the list form, splits of elements

Splits = tuple[tuple[int, ...], tuple[int, ...]]


def cut(splits: Splits, n: int | None) -> bool:
    """Split lists with fewer entries than the group's n ranks (a kernel's copy, cut at 30:
    its record_param_comms may hold them whole)."""
    sent, received = splits
    return n is not None and bool(sent or received) and (len(sent) < n or len(received) < n)


def whole(name: str, args: Mapping[str, Any], cut: Splits) -> Splits:
    """A record_param_comms' split sizes: its `Concrete Inputs` lists where they hold more
    entries than the (cut) `In`/`Out split size`, else those."""
    given = args.get("Concrete Inputs")
    if name != _RECORD or not isinstance(given, list) or len(given) <= _OUT_SPLITS:
        return cut
    found = (split_sizes(given[_IN_SPLITS]), split_sizes(given[_OUT_SPLITS]))
    return found if len(found[0]) + len(found[1]) > len(cut[0]) + len(cut[1]) else cut


def list_form_bytes(args: Mapping[str, Any], splits: Splits) -> int | None:
    """S of a list-form all_to_all whose splits count elements (Σ sent = `In msg nelems`):
    max(its input, Σ received) x dtype size; None for any other call."""
    sent, received = splits
    if args.get("Collective name") != _LIST_FORM or not (sent and received):
        return None  # first: every comm record and kernel comes here
    nelems, size = args.get("In msg nelems"), dtype_bytes(args.get("dtype"))
    if size is None:
        return None
    if not isinstance(nelems, int) or sum(sent) != nelems:
        return None
    return max(nelems, sum(received)) * size
