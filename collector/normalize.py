"""Raw Kineto events of one file → typed commscope events (pure).

`Normalizer.feed` is the hot path: per event one dict lookup on `cat`, then a short handler.
Events arrive as `RawEvent`s, the few fields a handler reads, from either parser: the fast path
decodes them straight from JSON (`fastparse.FastEvent`), the ijson path copies them from its
dicts (`from_item`). What it emits goes to `out` (the caller drains it in batches).

Communication kernels whose args lack the collective's name or size wait in `_pending` for
their launch (by `correlation`) and the innermost enclosing comm calls on the launching thread
(record_param_comms args first, then `Input Dims` of the comm ops); at `finish` each is
resolved, so the result does not depend on the order of events in the file. A `tid` may be a
string (PyTorch 1.8-1.10): a decimal one is its number, any other a name with an id of its own
(`string_tid`).

Memory is bounded by constants, not by the file:
- At most PENDING_MEMORY kernels wait. Past it, one is resolved now: in Kineto's layout (the
  head gives `distributedInfo`, a top-level key given twice counting once, so the group
  metadata is final; each thread's cpu ops and call annotations in start order) a kernel
  launched before its thread's latest start has met every call that can enclose its launch,
  and one of those is taken: exact. With none such, the kernel waiting longest is resolved
  with what is known so far and counted (`_EARLY`), as is a call that comes after a kernel it
  may enclose was resolved.
- A thread indexes at most CALL_MEMORY calls (32 B each): past it the earlier half, by
  start, is forgotten, and a lookup at an instant a forgotten call may hold is counted too.
- Kernel launches are remembered in two generations of at most LAUNCH_MEMORY each, in one
  table by correlation with the GPU work met before its launch (`launches.Launches`: a
  kernel whose launch was forgotten counts in `no_launch`); a launch whose kernel is pending
  is pinned to it, and one whose only kernel came first (CUDA's order) is not kept.
"""

from __future__ import annotations

import functools
import hashlib
import heapq
import re
from array import array
from bisect import bisect_right
from collections.abc import Callable, Mapping, Sequence
from itertools import accumulate, islice
from typing import Any, Final

import msgspec
from commscope.collector.classify import (
    BACKEND_CALL_PREFIXES,
    COMM_CALL_PREFIXES,
    collective_type,
    dtype_name,
    input_dims_bytes,
    is_comm_call,
    is_comm_kernel,
    kernel_collective,
    nelems_bytes,
    shape_group,
)
from commscope.collector.families import ACTIVITY_CATEGORIES, looks_like_comm, role, shown_name
from commscope.collector.gloosplits import Pairing, call_splits
from commscope.collector.graphs import KERNELS, graph_id, is_graph_launch
from commscope.collector.kernels import kernel_category
from commscope.collector.launches import (
    GRAPH_LAUNCH,
    KERNEL_LAUNCH,
    LANDED,
    WAITING,
    KernelNames,
    Launches,
    is_launch_call,
)
from commscope.collector.ncclsplits import Splits, cut, list_form_bytes
from commscope.collector.p2pbatch import (
    COALESCED,
    Batches,
    batch_bytes,
    batch_members,
    batch_peers,
)
from commscope.collector.p2ppeers import (
    GLOO_P2P,
    P2P_CALLS,
    HeldSpans,
    Peers,
    concrete_peer,
    global_rank,
    group_global,
    peers,
    record_global,
    record_group_peer,
    way_of,
)
from commscope.model.schema import (
    GROUP_SOURCES,
    LABEL_PATTERN,
    MAX_GROUPS,
    MAX_LABEL,
    MAX_LOOKALIKES,
    MAX_RANKS,
    CollectiveType,
    CommOp,
    CpuSpan,
    Event,
    EventDropReason,
    FileStats,
    GpuOp,
    GroupSource,
    KernelCategory,
    MemoryPeak,
    P2PMember,
    Step,
    TraceMeta,
)
from msgspec.structs import astuple, replace

LAUNCH_MEMORY: Final = WAITING  # `launches.Launches`
PENDING_MEMORY: Final = 1 << 12
CALL_MEMORY: Final = 1 << 16
_ROLE_MEMORY: Final = 1 << 14
_MEMO: Final = 1 << 10  # a file's distinct collective args remembered (`CallFacts`, `_alone`)
_BAD_SPAN: Final = "bad_span"
_NOT_COMPLETE: Final = "not_complete_span"
_BAD_ARGS: Final = "args_not_object"
_NOT_OBJECT: Final = "event_not_object"
_ODD_CAT: Final = "cat_not_string"
_NO_MEMORY: Final = "memory_event_incomplete"
_EARLY: Final = "comm_kernel_unresolved"
_NO_TID: Final = "bad_tid"
_LABEL: Final = re.compile(LABEL_PATTERN)
_PLAIN, _CALL, _RECORDED_CALL = 0, 1, 2
_BACKEND_PREFIXES: Final = (*BACKEND_CALL_PREFIXES, "record_param_comms")
_CPU_DEVICE: Final = 0  # c10::DeviceType::CPU in `[memory]` events; GPUs are 1 (CUDA, HIP)
_C10D_PREFIXES: Final = ("c10d::", "_c10d_functional")
_UNSEEN: Final[Any] = object()
_NUMBERS: Final = (int, float)  # a value's `type` among these: a number, not a bool
_STEP = 3  # a role: `ProfilerStep#N` as a cpu op (PyTorch 1.8-1.10 traces)
# Event categories by their lower-case name: today's Kineto names, PyTorch 1.8-1.10's
# capitalised ones (`Kernel`, `Operator`, `Runtime`, `Memcpy`, `Memset`), other devices'.
_CATEGORY: Final = {
    "kernel": "kernel",
    "gpu_memcpy": "gpu_memcpy",
    "memcpy": "gpu_memcpy",
    "gpu_memset": "gpu_memset",
    "memset": "gpu_memset",
    "cuda_runtime": "runtime",
    "cuda_driver": "runtime",
    "runtime": "runtime",
    "driver": "runtime",
    "mtia_runtime": "runtime",
    "xpu_runtime": "runtime",
    "xpu_driver": "runtime",
    "privateuse1_runtime": "runtime",
    "privateuse1_driver": "runtime",
    "cpu_op": "cpu_op",
    "operator": "cpu_op",
    "user_annotation": "user_annotation",
    "cpu_instant_event": "cpu_instant_event",
    # other accelerators' activity (MTIA's `mtia_ccp_events`, `collective_comm`): `families`
    **{
        cat: "kernel" if kind == "kernel" else "user_annotation"
        for cat, (kind, _) in ACTIVITY_CATEGORIES.items()
    },
}
LOOKALIKE_NAMES: Final = MAX_LOOKALIKES // 2  # look-alike kernel names a file reports
# Bounds on what a trace may claim (beyond them a value is dropped, and counted): times in µs
# fit int64 nanoseconds with room, names and labels stay short.
# 2**62 / 1000 is the double 4611686018427388.0 exactly: as an int it bounds every int and float
# alike (Python compares them exactly), and an int against an int is the cheaper test.
_MAX_US: Final = round(2**62 / 1000)
_MIN_US: Final = -_MAX_US  # once: `-_MAX_US` in a test makes a float per event
MAX_NAME: Final = 4096
_MAX_COUNT: Final = 2**62
# Thread ids: PyTorch 1.8-1.10 write `"tid": "1234"` for a thread and `"tid": "stream 7"` for a
# GPU stream. A decimal string is its number; any other string is a name, given an id of its
# own from a hash, at or below NAMED_TIDS, where no thread's number falls (a decimal string
# there is read as a name too).
NAMED_TIDS: Final = -(2**62)
_DECIMAL: Final = re.compile(r"-?[0-9]{1,19}")


class RawEvent(msgspec.Struct, gc=False):
    """One traceEvents item as far as the handlers read it. A missing key is None: every
    handler treats a missing key as it treats null (both fail the same type test). `args` is
    the item's value as is."""

    ph: Any = None
    cat: Any = None
    name: Any = None
    pid: Any = None  # read by no handler: here for msgspec, which meets Kineto's keys in order
    tid: Any = None
    ts: Any = None
    dur: Any = None
    args: Any = None


def from_item(item: Any) -> Any:
    """The RawEvent of an item ijson parsed; an item that is not an object as it is (the
    normaliser drops it)."""
    if type(item) is not dict:
        return item
    get = item.get
    return RawEvent(
        get("ph"), get("cat"), get("name"), None, get("tid"), get("ts"), get("dur"), get("args")
    )


class CommCall(msgspec.Struct, frozen=True, gc=False):
    """What one op of a collective says about its message: a kernel's args, a CPU-side
    call (record_param_comms, c10d::*, nccl:*, gloo:*). Only these few fields are kept, never
    the raw args, and nothing here is tracked by the cyclic GC: memory stays small."""

    name: str
    start_ns: int
    end_ns: int
    collective_name: str | None = None
    nelems_bytes: int | None = None
    dims_bytes: int | None = None
    group_size: int | None = None
    pg: str | None = None
    seq: int | None = None
    shape_group: int | None = None  # the group size its tensor shapes imply
    dtype: str | None = None  # `dtype`, else the `Input type` of a first input it sized
    in_splits: tuple[int, ...] = ()
    out_splits: tuple[int, ...] = ()
    peer: int | None = None  # a send's `Dst Rank` or a receive's `Src Rank` (global)
    group_peer: int | None = None  # the peer's rank within the call's group (`p2ppeers`)
    group_rank: int | None = None  # this rank's within the group (Nsight Systems: NCCL's)
    members: tuple[P2PMember, ...] = ()  # an NCCL group's sends and receives (`nsys`)

    @property
    def backend(self) -> bool:
        return self.name.startswith(_BACKEND_PREFIXES)


# The args `comm_call` reads: a call whose args hold none of them (most c10d ops and
# record_param_comms of older PyTorch: only `External id`) says nothing but its name and span.
_FACT_KEYS: Final = frozenset(
    {
        "Collective name",
        "In msg nelems",
        "Out msg nelems",
        "dtype",
        "Input Dims",
        "Input dims",
        "Input type",
        "Group size",
        "Process Group Name",
        "Seq",
        "In split size",
        "Out split size",
        "Src Rank",
        "Dst Rank",
        "Rank",
    }
)


def _size(args: Mapping[str, Any], splits: Splits) -> int | None:
    """S from collective args; a list-form all_to_all's from its splits (`ncclsplits`)."""
    listed = list_form_bytes(args, splits)
    return listed if listed is not None else nelems_bytes(args)


def comm_call(name: str, start_ns: int, end_ns: int, args: Mapping[str, Any]) -> CommCall:
    if _FACT_KEYS.isdisjoint(args):
        return CommCall(name[:MAX_NAME], start_ns, end_ns)
    label = args.get("Collective name")
    dims = input_dims_bytes(args)
    sent, received = call_splits(name, args)
    peer = _bounded(_int(args.get("Dst Rank", args.get("Src Rank"))), MAX_RANKS - 1)
    group_peer = record_group_peer(args, MAX_RANKS)
    return CommCall(
        name[:MAX_NAME],
        start_ns,
        end_ns,
        collective_name=str(label)[:MAX_LABEL] if label is not None else None,
        nelems_bytes=_bounded(_size(args, (sent, received)), _MAX_COUNT),
        dims_bytes=_bounded(dims, _MAX_COUNT),
        group_size=_bounded(_int(args.get("Group size")), MAX_RANKS, least=1),
        pg=_pg(args),
        seq=_bounded(_int(args.get("Seq")), _MAX_COUNT),
        shape_group=_bounded(shape_group(name, args), MAX_RANKS, least=1),
        dtype=_dtype(args, sized=dims is not None),
        in_splits=sent,
        out_splits=received,
        peer=peer if peer is not None else record_global(group_peer, args, MAX_RANKS),
        group_peer=group_peer,
    )


# Every arg `comm_call` reads (its helpers' too) but `Seq`, each call's own.
_READ_KEYS: Final = tuple(
    sorted(
        _FACT_KEYS - {"Seq"}
        | {"Concrete Inputs", "Process Group Ranks", "Global rank start", "Global rank stride"}
    )
)


class CallFacts:
    """`comm_call` remembered by the args it reads, their values and types (bounded): a file
    repeats each collective's args every step but for `Seq`, so its few distinct facts are
    worked out once. Args holding a list (`Input Dims`, `Concrete Inputs`) or a float are
    not."""

    __slots__ = ("_known",)

    def __init__(self) -> None:
        self._known: dict[tuple[Any, ...], CommCall] = {}

    def __call__(self, name: str, start_ns: int, end_ns: int, args: Mapping[str, Any]) -> CommCall:
        if _FACT_KEYS.isdisjoint(args):
            return CommCall(name[:MAX_NAME], start_ns, end_ns)
        values = tuple(map(args.get, _READ_KEYS))
        types = tuple(map(type, values))
        if float in types:  # 0.0 and -0.0 are equal keys that print apart
            return comm_call(name, start_ns, end_ns, args)
        try:
            known = self._known.get(key := (name, values, types))
        except TypeError:  # a list among them
            return comm_call(name, start_ns, end_ns, args)
        if known is None:
            known = comm_call(name, start_ns, end_ns, args)
            _remember(self._known, key, known)
            return known
        seq = _bounded(_int(args.get("Seq")), _MAX_COUNT)
        return replace(known, start_ns=start_ns, end_ns=end_ns, seq=seq)


def _remember(known: dict[Any, Any], key: Any, value: Any) -> None:
    """Keep `value` under `key`, at most _MEMO entries: past them all are forgotten (what
    repeats comes back at once; args that never repeat, sizes that change every call, do
    not hold memory)."""
    if len(known) >= _MEMO:
        known.clear()
    known[key] = value


def _facts_of(call: CommCall) -> tuple[Any, ...]:
    """A call's fields but its span and `Seq`, in their order: what calls of one collective
    share every step."""
    fields = astuple(call)
    return (fields[0], *fields[3:8], *fields[9:])


class Special(msgspec.Struct, frozen=True, gc=False):
    """How a kernel that is neither plain compute nor communication counts: `fused` (computes
    and communicates: in neither union), or a compute kernel named like communication
    (`lookalike`, its time listed under its shown name)."""

    fused: bool
    category: KernelCategory
    shown: str | None = None


def _dtype(args: Mapping[str, Any], sized: bool) -> str | None:
    """The call's dtype: its `dtype` arg, else the `Input type` of its first input when that
    input gave a size (`sized`: a tensor, never a scalar's or a list's tag)."""
    given = args.get("dtype")
    if given is None and sized:
        given = args["Input type"][0]
    return _label(dtype_name(given))


class _PendingKernel:
    """A communication kernel whose collective or size must come from its launch."""

    __slots__ = ("facts", "launch")

    def __init__(self, facts: CommCall) -> None:
        self.facts = facts
        self.launch: tuple[int, int] | None = None


class _CpuRuns:
    """The open run of cpu_op time per thread (µs floats, scalars only); closed runs are emitted."""

    __slots__ = ("comm_call", "end", "start")

    def __init__(self, comm_call: bool) -> None:
        self.comm_call = comm_call
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}

    def extend(self, out: list[Event], tid: int, start_us: float, end_us: float) -> None:
        """Merge [start, end] into the thread's open run if they overlap, else close the run
        and open another (the pipeline unions whatever order the runs come in)."""
        open_start = self.start.get(tid)
        if open_start is not None:
            open_end = self.end[tid]
            if start_us <= open_end and end_us >= open_start:
                if end_us > open_end:
                    self.end[tid] = end_us
                if start_us < open_start:
                    self.start[tid] = start_us
                return
            out.append(CpuSpan(tid, _ns(open_start), _ns(open_end), self.comm_call))
        self.start[tid] = start_us
        self.end[tid] = end_us

    def close_all(self, out: list[Event]) -> None:
        for tid in sorted(self.start):
            start, end = self.start[tid], self.end[tid]
            out.append(CpuSpan(tid, _ns(start), _ns(end), self.comm_call))
        self.start.clear()
        self.end.clear()


class _ThreadCalls:
    """One thread's comm calls as int64 columns (32 bytes a call) plus a sorted order: kept up
    as calls are added in (start, -end) order (a file lists them so), else built lazily."""

    __slots__ = ("ends", "facts", "forgotten", "order", "reach", "seqs", "sorted_starts", "starts")

    def __init__(self) -> None:
        self.starts, self.ends = array("q"), array("q")
        self.facts, self.seqs = array("q"), array("q")
        self.order: Sequence[int] | None = range(0)  # indices in (start, -end) order, or None
        self.sorted_starts: Sequence[int] = self.starts
        self.reach: array[int] = array("q")  # in that order, the latest end of the calls so far
        self.forgotten = -(2**63)  # the latest end of the calls forgotten (`forget_older`)

    def append(self, start: int, end: int, fact: int, seq: int) -> None:
        """Add a call; the order stays built while the calls come in order."""
        starts, ends, count = self.starts, self.ends, len(self.starts)
        in_order = type(self.order) is range and (
            not count or _in_order(starts[-1], start, ends[-1], end)
        )
        starts.append(start)
        ends.append(end)
        self.facts.append(fact)
        self.seqs.append(seq)
        if in_order:
            self.order = range(count + 1)
            self.reach.append(max(self.reach[-1], end) if count else end)
        else:
            self.order = None
        if count >= CALL_MEMORY:
            self.forget_older()

    def forget_older(self) -> None:
        """Forget the earlier half of the calls (by start): `forgotten` says until when."""
        order, _ = start_order(self.starts, self.ends)
        columns = [self.starts, self.ends, self.facts, self.seqs]
        if type(order) is not range:
            columns = [array("q", (column[i] for i in order)) for column in columns]
        cut = len(order) // 2
        self.forgotten = max(self.forgotten, *columns[1][:cut])
        for column in columns:
            del column[:cut]
        self.starts, self.ends, self.facts, self.seqs = columns
        self.order, self.sorted_starts = range(len(self.starts)), self.starts
        self.reach = array("q", accumulate(self.ends, max))


class CallIndex:
    """Comm calls per thread, answering 'which calls enclose this instant'.

    Calls repeat the same facts every step (op, sizes, group), so each distinct set of facts is
    kept once and a call costs four int64 columns (a fifth once looked up, `reach`: a lookup
    stops at the first call back that no call up to it outlasts).
    """

    _NO_SEQ: Final = -(2**63)

    def __init__(self) -> None:
        self._threads: dict[int, _ThreadCalls] = {}
        self.missed = 0  # lookups at an instant some forgotten call may have held
        self._facts: list[tuple[Any, ...]] = []
        self._ids: dict[tuple[Any, ...], int] = {}

    def add(self, tid: int, call: CommCall) -> None:
        key = _facts_of(call)
        fact = self._ids.get(key)
        if fact is None:
            fact = self._ids[key] = len(self._facts)
            self._facts.append(key)
        thread = self._threads.get(tid)
        if thread is None:
            thread = self._threads[tid] = _ThreadCalls()
        thread.append(
            call.start_ns, call.end_ns, fact, self._NO_SEQ if call.seq is None else call.seq
        )

    @property
    def held(self) -> int:
        return sum(len(thread.starts) for thread in self._threads.values())

    def enclosing(self, tid: int, ts_ns: int) -> list[CommCall]:
        """Calls on `tid` that contain `ts_ns`, innermost (latest start) first."""
        thread = self._threads.get(tid)
        if thread is None:
            return []
        if ts_ns <= thread.forgotten:
            self.missed += 1
        if thread.order is None:
            thread.order, thread.sorted_starts = start_order(thread.starts, thread.ends)
            ends, order = thread.ends, thread.order
            in_order = ends if isinstance(order, range) else (ends[i] for i in order)
            thread.reach = array("q", accumulate(in_order, max))
        found = []
        order, reach, ends = thread.order, thread.reach, thread.ends
        for at in range(bisect_right(thread.sorted_starts, ts_ns) - 1, -1, -1):  # no copy
            if reach[at] < ts_ns:
                break  # no call up to this one ends as late as ts_ns
            i = order[at]
            if ends[i] >= ts_ns:
                found.append(self._call(thread, i))
        return found

    def _call(self, thread: _ThreadCalls, i: int) -> CommCall:
        facts, seq = self._facts[thread.facts[i]], thread.seqs[i]
        name, label, nelems, dims, group, pg, shape, dtype, sends, receives, *peers = facts
        return CommCall(name, thread.starts[i], thread.ends[i], label, nelems, dims, group, pg,
                        None if seq == self._NO_SEQ else seq, shape, dtype, sends,
                        receives, *peers)  # fmt: skip


def start_order(starts: array[int], ends: array[int]) -> tuple[Sequence[int], Sequence[int]]:
    """The calls' indices in (start, -end) order and their starts in that order. A file lists
    a thread's calls by start: then they are the calls as added, and nothing is copied (a
    sort's keys and lists cost ~200 B a call, the calls themselves 32 B)."""
    if all(map(_in_order, starts, islice(starts, 1, None), ends, islice(ends, 1, None))):
        return range(len(starts)), starts
    order = sorted(range(len(starts)), key=lambda i: (starts[i], -ends[i]))
    return order, [starts[i] for i in order]


def _in_order(start: int, next_start: int, end: int, next_end: int) -> bool:
    return start < next_start or (start == next_start and end >= next_end)


class Normalizer:
    """Turns one file's raw events into typed events; see the module docstring."""

    def __init__(self) -> None:
        self.out: list[Event] = []
        self.stats = FileStats()
        self.has_gpu = False
        self._meta = TraceMeta()
        self._calls = CallIndex()
        self._facts = CallFacts()  # `comm_call`, remembered
        self._alone_ops: dict[tuple[Any, ...], CommOp] = {}  # `_alone`'s
        self._links = Launches(self.out)  # launches and GPU work by correlation (`launches`)
        self._pending: dict[int, list[_PendingKernel]] = {}  # CUDA graphs share one launch
        self._waiting = 0  # kernels in _pending
        self._ready: dict[int, list[tuple[int, int]]] = {}  # tid -> heap of (launch ns, corr.)
        self._horizon: dict[int, Any] = {}  # tid -> latest start (µs) of a call-bearing event
        self._unordered: set[int] = set()  # threads whose call-bearing events were not in order
        self._resolved_upto: dict[int, int] = {}  # tid -> latest launch (ns) resolved early
        self._top_keys: set[str] = set()
        self._settled = False  # the head gave distributedInfo: the group metadata is final
        self._waiting_meta: list[CommCall] = []
        self._gloo_alltoall = Pairing()  # gloo all-to-all spans held for their split sizes
        self._p2p = HeldSpans()  # gloo:send/recv spans until their c10d operator (bounded)
        self._batches = Batches()  # NCCL's P2P records, for their coalesced kernel
        self._busy = _CpuRuns(comm_call=False)
        self._calling = _CpuRuns(comm_call=True)
        self._roles: dict[str, int] = {}
        self._tids: dict[str, int] = {}  # string tid -> its id (`string_tid`), bounded
        self._categories: dict[str, KernelCategory | Special | None] = {}  # None: comm
        self._lookalikes: dict[str, int] = {}  # shown name -> ns (ROLE_MEMORY names at most)
        self._allocated: dict[int, int] = {}  # GPU device -> highest Total Allocated
        self._reserved: dict[int, int] = {}  # GPU device -> highest Total Reserved
        self._names = KernelNames()  # count and time per kernel name (`collector.launches`)
        self._launch_names: dict[str, int] = {}  # runtime call name -> KERNEL_LAUNCH, ...
        self._kinds: dict[str, Callable[[RawEvent], None]] = {
            "kernel": self._kernel,
            "gpu_memcpy": self._memcpy,
            "gpu_memset": self._memset,
            "runtime": self._runtime,
            "cpu_op": self._cpu_op,
            "user_annotation": self._annotation,
            "cpu_instant_event": self._instant,
        }
        # Each `cat` value seen -> its handler, None for categories of no use (learnt).
        self.handlers: dict[object, Callable[[RawEvent], None] | None] = {
            cat: self._kinds[kind] for cat, kind in _CATEGORY.items()
        }

    def feed(self, events: list[Any]) -> None:
        """Handle `events` (RawEvents, and items that are not objects: dropped, counted)."""
        handlers = self.handlers
        for raw in events:
            try:
                handler = handlers[raw.cat]  # a subscript costs less than a call to `get`
            except KeyError:
                handler = self.unseen
            except (AttributeError, TypeError):
                self.drop(_ODD_CAT if isinstance(raw, RawEvent) else _NOT_OBJECT)
                continue
            if handler is not None:
                handler(raw)

    def unseen(self, raw: RawEvent) -> None:
        """An event of a category not seen before: learn its handler (remembered, bounded)."""
        cat = raw.cat
        kind = _CATEGORY.get(cat.lower()) if isinstance(cat, str) else None
        found = self._kinds[kind] if kind is not None else None
        if len(self.handlers) < _ROLE_MEMORY:
            self.handlers[cat] = found
        if found is not None:
            found(raw)

    @property
    def meta(self) -> TraceMeta:
        return self._meta

    @property
    def held(self) -> tuple[int, int, int]:
        """What is held for later events: kernels waiting, launches kept, calls indexed."""
        return self._waiting, self._links.held, self._calls.held

    def set_top(self, top: Mapping[str, Any]) -> None:
        """Metadata keys found in the document (header, then trailer): a key given twice, the
        first stands (so the head's `distributedInfo` settles the group metadata)."""
        fresh = {key: value for key, value in top.items() if key not in self._top_keys}
        self._top_keys.update(fresh)
        self._meta = _merge_meta(self._meta, _meta_from_top(fresh))
        self._alone_ops.clear()  # worked out with the metadata before
        self._settled = "distributedInfo" in self._top_keys

    # ------------------------------------------------------------------ handlers

    def _span(self, raw: RawEvent) -> tuple[int, int] | None:
        if raw.ph != "X":
            self.drop(_NOT_COMPLETE)
            return None
        try:
            ts, dur = raw.ts, raw.dur
            if not (_MIN_US <= ts <= _MAX_US and 0 <= dur <= _MAX_US):
                raise ValueError
            if type(ts) is int and type(dur) is int:
                return ts * 1000, dur * 1000  # what `round` gives, at a third of its cost
            return round(ts * 1000), round(dur * 1000)
        except (TypeError, ValueError):
            self.drop(_BAD_SPAN)
            return None

    def drop(self, reason: EventDropReason, count: int = 1) -> None:
        """Count what cannot be used (events, values), by a bounded reason."""
        dropped = self.stats.dropped
        dropped[reason] = dropped.get(reason, 0) + count

    def _args(self, raw: RawEvent) -> Mapping[str, Any]:
        args = raw.args
        if args is None or type(args) is dict:
            return args or {}
        self.drop(_BAD_ARGS)
        return {}

    def _kernel(self, raw: RawEvent) -> None:
        span = self._span(raw)
        name = raw.name
        if span is None or not isinstance(name, str):
            return
        self.has_gpu = True
        category: KernelCategory | Special | None = self._categories.get(name, _UNSEEN)
        if category is _UNSEEN:
            category = self._category(name)
        self._names.add(name, span[1], category is None)
        if category is None:
            self._comm_kernel(raw, name, span)
            return
        args = raw.args
        if type(args) is dict and type(correlation := args.get("correlation")) is int:
            self._links.kernel(correlation, span, False, args, True)
        if isinstance(category, str):  # most kernels: plain compute
            self.out.append(GpuOp("compute", span[0], span[1], category))
        else:
            self._special(span, category)

    def _special(self, span: tuple[int, int], special: Special) -> None:
        if special.fused:
            self.out.append(GpuOp("fused", span[0], span[1]))
        else:
            self.out.append(GpuOp("compute", span[0], span[1], special.category))
            self._lookalike(special.shown, span[1])

    def _lookalike(self, shown: str | None, dur_ns: int) -> None:
        self.stats.lookalike_ns += dur_ns
        names = self._lookalikes
        if shown is not None and (shown in names or len(names) < _ROLE_MEMORY):
            names[shown] = names.get(shown, 0) + dur_ns

    def _comm_kernel(self, raw: RawEvent, name: str, span: tuple[int, int]) -> None:
        self.stats.comm_kernels += 1
        args = self._args(raw)
        facts = self._facts(name, span[0], span[0] + span[1], args)
        correlation = args.get("correlation")
        described = facts.collective_name is not None and facts.nelems_bytes is not None
        described = described and not cut((facts.in_splits, facts.out_splits), facts.group_size)
        if type(correlation) is not int:
            self.out.append(self._comm_op(facts, [], on_gpu=True, launched=described))
            return
        self._links.kernel(correlation, span, True, args, described)
        if described:
            self.out.append(self._comm_op(facts, [], on_gpu=True, launched=True))
            return
        kernel = _PendingKernel(facts)
        kernel.launch = self._links.launch(correlation)
        self._wait(correlation, kernel)

    def _category(self, name: str) -> KernelCategory | Special | None:
        """A kernel's category; None for a communication kernel, a `Special` for a fused one
        or one named like communication (remembered, bounded)."""
        category = kernel_kind(name)
        if len(self._categories) < _ROLE_MEMORY and len(name) <= MAX_NAME:
            self._categories[name] = category
        return category

    def _instant(self, raw: RawEvent) -> None:
        """`[memory]` events: keep each GPU's highest allocated and reserved totals."""
        if raw.name != "[memory]":
            return
        args: Mapping[str, Any] = raw.args if type(raw.args) is dict else self._args(raw)
        try:  # subscripts: ~1 in 7 events is `[memory]`, and a call to `get` costs more
            device, kind = args["Device Id"], args["Device Type"]
            allocated = args["Total Allocated"]
        except KeyError:
            device = kind = allocated = None
        if type(device) is not int or type(kind) is not int or type(allocated) is not int:
            self.drop(_NO_MEMORY)
            return
        if not 0 <= allocated <= _MAX_COUNT:  # a count (inline, as above)
            self.drop(_NO_MEMORY)
            return
        if kind == _CPU_DEVICE:
            return
        if allocated > self._allocated.get(device, -1):
            self._allocated[device] = allocated
        reserved = args.get("Total Reserved")  # a count when above the highest so far (or -1)
        if type(reserved) is int and _MAX_COUNT >= reserved > self._reserved.get(device, -1):
            self._reserved[device] = reserved

    def _memcpy(self, raw: RawEvent) -> None:
        span = self._span(raw)
        if span is not None:
            self.has_gpu = True
            self.out.append(GpuOp("memcpy", span[0], span[1]))
            self._graph_copy(raw.args)

    def _memset(self, raw: RawEvent) -> None:
        span = self._span(raw)
        if span is not None:
            self.has_gpu = True
            self.out.append(GpuOp("memset", span[0], span[1]))
            self._graph_copy(raw.args)

    def _graph_copy(self, args: object) -> None:
        """A memcpy or memset that may be a node of a graph's replay (`collector.graphs`)."""
        if type(args) is dict and type(correlation := args.get("correlation")) is int:
            self._links.copy(correlation, graph_id(args.get("graph id")))

    def _runtime(self, raw: RawEvent) -> None:
        try:
            name = raw.name
            if "aunch" not in name:
                return
            args, tid, ts = raw.args, raw.tid, raw.ts
            correlation = args.get("correlation") if type(args) is dict else None
            if type(correlation) is not int or not _MIN_US <= ts <= _MAX_US:
                return
        except TypeError:
            return  # a runtime call we cannot place is no launch we could use
        kind = self._launch_names.get(name)
        if kind is None:
            kind = self._launch_kind(name)
        dur = raw.dur
        if kind and not (type(dur) in _NUMBERS and 0 <= dur <= _MAX_US):
            kind = 0  # no duration to count: a launch still, of no kind
        start_ns = ts * 1000 if type(ts) is int else round(ts * 1000)  # `_ns`, inline
        dur_ns = (dur * 1000 if type(dur) is int else round(dur * 1000)) if kind else -1
        met = self._links.call(correlation, kind, start_ns, dur_ns)
        # the call's duration while its kernel may still join it (else -1)
        waiting = dur_ns if kind == KERNEL_LAUNCH and not (met and met[KERNELS]) else -1
        if type(tid) is not int and (tid := self._thread(tid)) is None:
            if waiting >= 0:
                self._links.keep(correlation, (None, start_ns, waiting))  # for its kernel
            return
        if correlation in self._pending:
            self._pin(correlation, (tid, start_ns))
        elif not (met and met[LANDED]) or "Graph" in name or "Multi" in name:
            self._links.keep(correlation, (tid, start_ns, waiting))  # for its kernel(s)
        # else its one kernel came first: no kernel needs it (one of several is kept: graphs,
        # multi-device launches)

    def _pin(self, correlation: int, launch: tuple[int, int]) -> None:
        """The launch of comm kernels waiting for it (`_pending`)."""
        for kernel in self._pending[correlation]:
            kernel.launch = launch
        self._ready_at(launch, correlation)

    def _launch_kind(self, name: str) -> int:
        """Whether a runtime call of this name launches one kernel (KERNEL_LAUNCH), a graph
        (GRAPH_LAUNCH) or neither (0) (remembered, bounded)."""
        kind = KERNEL_LAUNCH if is_launch_call(name) else GRAPH_LAUNCH * is_graph_launch(name)
        if len(self._launch_names) < _ROLE_MEMORY and len(name) <= MAX_NAME:
            self._launch_names[name] = kind
        return kind

    def _cpu_op(self, raw: RawEvent) -> None:
        try:
            name, tid, ts, dur = raw.name, raw.tid, raw.ts, raw.dur
            end = ts + dur
            role = self._roles.get(name)
            if role is None:
                role = self._role(name)
            if not (0 <= dur <= _MAX_US and _MIN_US <= ts <= _MAX_US):
                raise ValueError
        except (TypeError, ValueError):
            self.drop(_BAD_SPAN)
            return
        if role and role == _STEP:  # most ops are plain (0): one test
            self._step(raw, name)  # PyTorch 1.8-1.10 record ProfilerStep#N as an operator
            return
        if type(tid) is not int and (tid := self._thread(tid)) is None:
            return
        busy = self._busy
        start = busy.start.get(tid)
        if start is None or ts < start or end > busy.end[tid]:  # else: nested in the open run
            self._advance(tid, ts)  # a nested op starts after the run: the horizon may lag
            busy.extend(self.out, tid, ts, end)
        if role:
            self._calling.extend(self.out, tid, ts, end)
            if name in P2P_CALLS:
                peer = concrete_peer(self._args(raw))
                self._gloo_p2p(self._p2p.call(tid, _ns(ts), _ns(end), peer, self._settled))
            if role == _RECORDED_CALL:
                start_ns = round(ts * 1000)
                call = self._facts(name, start_ns, round(end * 1000), self._args(raw))
                self._add_call(tid, call)
                self._gloo_alltoall.call(call)
                self._batches.add(tid, call)

    def _thread(self, tid: object) -> int | None:
        """The id of a trace's `tid`: an int as it is, a string as `string_tid` reads it
        (remembered, bounded); None for anything else (null, a bool, a float, a list): the
        event is dropped (counted)."""
        if type(tid) is int:
            return tid
        if not isinstance(tid, str):
            self.drop(_NO_TID)
            return None
        found = self._tids.get(tid)
        if found is None:
            found = string_tid(tid)
            if len(self._tids) < _ROLE_MEMORY and len(tid) <= MAX_NAME:
                self._tids[tid] = found
        return found

    def _role(self, name: object) -> int:
        if not isinstance(name, str):
            raise TypeError
        role = _PLAIN
        if name.startswith("ProfilerStep#"):
            role = _STEP
        elif is_comm_call(name):
            role = _RECORDED_CALL if name.startswith(COMM_CALL_PREFIXES) else _CALL
        if len(self._roles) < _ROLE_MEMORY and len(name) <= MAX_NAME:
            self._roles[name] = role
        return role

    def _annotation(self, raw: RawEvent) -> None:
        name = raw.name
        if not isinstance(name, str):
            return
        if name.startswith("ProfilerStep#"):
            self._step(raw, name)
        elif name.startswith("gloo:"):
            self._gloo(raw, name)
        elif name.startswith(BACKEND_CALL_PREFIXES):
            span = self._span(raw)
            tid = self._thread(raw.tid) if span is not None else None
            if span is not None and tid is not None:
                self._advance(tid, raw.ts)
                self._add_call(tid, self._facts(name, span[0], sum(span), self._args(raw)))

    def _step(self, raw: RawEvent, name: str) -> None:
        span = self._span(raw)
        tid = self._thread(raw.tid) if span is not None else None
        number = name.removeprefix("ProfilerStep#")
        if span is None or tid is None:
            return
        if not (number.isascii() and number.isdigit() and len(number) <= 18):
            self.drop("step_without_number")
            return
        self.out.append(Step(int(number), span[0], span[1], tid))

    def _gloo(self, raw: RawEvent, name: str) -> None:
        span = self._span(raw)
        if span is None:
            return
        facts = self._facts(name, span[0], span[0] + span[1], self._args(raw))
        if self._gloo_alltoall.span(facts):
            return
        if name in GLOO_P2P and (tid := self._thread(raw.tid)) is not None:
            self._gloo_p2p(self._p2p.span(tid, facts, self._settled))  # peer: its operator's
            return
        if not self._settled and self._meta.world_size is None and facts.group_size is None:
            self._waiting_meta.append(facts)
            return
        self.out.append(self._comm_op(facts, [facts], on_gpu=False))

    # ------------------------------------------------------------------ resolution

    def _advance(self, tid: int, ts: Any) -> None:
        """`ts` (µs) starts a call-bearing event on `tid`: the thread's horizon (a lower bound
        of the latest start: a call after it that starts before it is counted, `_add_call`)."""
        last = self._horizon.get(tid)
        if last is None or ts > last:
            self._horizon[tid] = ts
        elif ts < last:
            self._out_of_order(tid)

    def _out_of_order(self, tid: int) -> None:
        """A thread's events came out of start order: its kernels wait for the file's end."""
        self._unordered.add(tid)
        self._ready.pop(tid, None)

    def _add_call(self, tid: int, call: CommCall) -> None:
        """Index a call; counted if it may enclose the launch of a kernel already resolved."""
        upto = self._resolved_upto.get(tid)
        if upto is not None and call.start_ns <= upto:
            self.drop(_EARLY)
        self._calls.add(tid, call)

    def _wait(self, correlation: int, kernel: _PendingKernel) -> None:
        """Keep a kernel until its launch and the calls around it are known; past
        PENDING_MEMORY kernels waiting, the one waiting longest is resolved now (counted)."""
        kernels = self._pending.get(correlation)
        if kernels is None:
            kernels = self._pending[correlation] = []
        kernels.append(kernel)
        self._waiting += 1
        if kernel.launch is not None:
            self._ready_at(kernel.launch, correlation)
        if self._waiting > PENDING_MEMORY:
            self._make_room()

    def _ready_at(self, launch: tuple[int, int], correlation: int) -> None:
        """The kernels of `correlation` are resolved once their launching thread's horizon
        has passed the launch (see the module docstring)."""
        tid, ts_ns = launch
        if self._settled and tid not in self._unordered:
            heap = self._ready.get(tid)
            if heap is None:
                heap = self._ready[tid] = []
            heapq.heappush(heap, (ts_ns, correlation))

    def _make_room(self) -> None:
        """Resolve one waiting kernel: launched before its thread's horizon if one is (exact),
        else the one waiting longest (counted)."""
        pending = self._pending
        for tid, heap in self._ready.items():
            while heap and heap[0][1] not in pending:
                heapq.heappop(heap)  # resolved already
            if heap and heap[0][0] < _ns(self._horizon.get(tid, _MIN_US)):
                self._resolve_now(heapq.heappop(heap)[1])
                return
        oldest = next(iter(pending))
        self.drop(_EARLY, len(pending[oldest]))
        self._resolve_now(oldest)
        if sum(map(len, self._ready.values())) > 2 * PENDING_MEMORY:
            for tid, heap in self._ready.items():  # drop what was resolved (at most 2x)
                self._ready[tid] = [entry for entry in heap if entry[1] in pending]
                heapq.heapify(self._ready[tid])

    def _resolve_now(self, correlation: int) -> None:
        kernels = self._pending.pop(correlation, None)
        if kernels is not None:
            self._waiting -= len(kernels)
            self._resolve(kernels)
            upto = self._resolved_upto
            for launch in {k.launch for k in kernels if k.launch is not None}:
                if launch[1] > upto.get(launch[0], launch[1] - 1):
                    upto[launch[0]] = launch[1]

    def _resolve(self, kernels: list[_PendingKernel]) -> None:
        for kernel in kernels:
            calls = self._calls.enclosing(*kernel.launch) if kernel.launch else []
            launched = kernel.launch is not None
            op = self._comm_op(kernel.facts, calls, True, launched)
            if kernel.launch is not None:
                self._batches.launched(kernel.launch[0], calls)
                op = self._batched(op, kernel.facts, calls, kernel.launch)
            self.out.append(op)

    def _batched(
        self, op: CommOp, facts: CommCall, calls: list[CommCall], launch: tuple[int, int]
    ) -> CommOp:
        """A SendRecv kernel of no named collective launched by `nccl:coalesced`, or inside
        no comm call at all (releases whose `nccl:coalesced` ends before the launch): the P2P
        records of its batch (`collector.p2pbatch`) say it is SendRecv, its size, and its
        peer when one."""
        if op.collective != "Other" or kernel_collective(facts.name) != "SendRecv":
            return op
        coalesced = next((c for c in calls if c.name == COALESCED), None)
        if coalesced is None and calls:
            return op
        batch_ns = coalesced.start_ns if coalesced is not None else launch[1]
        members = self._batches.members(launch[0], batch_ns)
        if not members:
            return op
        groups = self._meta.pg_ranks
        found = batch_peers(members, groups)
        size = op.message_bytes if op.message_bytes is not None else batch_bytes(members)
        self.stats.sizes_unknown -= op.message_bytes is None and size is not None
        single = found.send_to is not None or found.recv_from is not None
        return replace(op, collective="SendRecv", message_bytes=size, send_to=found.send_to,
                       recv_from=found.recv_from,
                       members=() if single else batch_members(members, groups))  # fmt: skip

    def _comm_op(
        self, primary: CommCall, calls: list[CommCall], on_gpu: bool, launched: bool = True
    ) -> CommOp:
        """The collective of a kernel (or gloo span) from the comm calls around its launch,
        innermost first (`_collective`; with no call around it, `_alone`), counted: a kernel
        with no launch, a size unknown."""
        if on_gpu and not launched:
            self.stats.no_launch += 1
        op = self._alone(primary, on_gpu) if not calls else self._collective(primary, calls, on_gpu)
        if op.message_bytes is None:
            self.stats.sizes_unknown += 1
        return op

    def _alone(self, primary: CommCall, on_gpu: bool) -> CommOp:
        """`_collective` of a call with none around it: worked out once for the same facts
        (remembered, bounded; forgotten when the metadata changes), then given this call's
        span and `Seq`."""
        key = (on_gpu, *_facts_of(primary))
        known = self._alone_ops.get(key)
        if known is None:
            known = self._collective(primary, [], on_gpu)
            _remember(self._alone_ops, key, known)
            return known
        return replace(known, start_ns=primary.start_ns, seq=primary.seq,
                       dur_ns=primary.end_ns - primary.start_ns)  # fmt: skip

    def _collective(self, primary: CommCall, calls: list[CommCall], on_gpu: bool) -> CommOp:
        """The collective of `primary` from `calls`. Only the innermost record_param_comms
        speaks for the call: an outer one records a coalesced group of calls (its size is
        their sum)."""
        own = _own_calls(calls)
        records = [primary, *(c for c in own if c.name == "record_param_comms")]
        collective = collective_of(primary, records, own)
        group, source = self._group_size(records, own)
        size, pg, seq = _first_known(records)
        if size is None:
            size = _size_from_calls(own, collective, group)
        start, dur = primary.start_ns, primary.end_ns - primary.start_ns
        dtype = next((c.dtype for c in (*records, *own) if c.dtype is not None), None)
        sends, receives = _splits(records)
        found = _peer(collective, primary, records, self._meta.pg_ranks)
        return CommOp(collective, start, dur, size, group, on_gpu, pg, seq, source, dtype,
                      sends, receives, *found)  # fmt: skip

    def _gloo_p2p(self, resolved: list[tuple[CommCall, int | None]]) -> None:
        """gloo send/recv spans, each with the peer its c10d operator names (a group rank)."""
        for facts, peer in resolved:
            known = facts if facts.peer is not None else replace(
                facts, peer=global_rank(peer, self._meta.pg_ranks))  # fmt: skip
            self.out.append(self._comm_op(known, [known], on_gpu=False))

    def _group_size(
        self, records: list[CommCall], calls: list[CommCall]
    ) -> tuple[int | None, GroupSource | None]:
        """(n, where it came from): the `Group size` arg, else the call's process group in
        pg_config, else what an all-gather's or reduce-scatter's shapes imply, else the
        trace's only process group, else the world size (DESIGN.md's order)."""
        group_arg, pg_config, shape, world = GROUP_SOURCES[:4]
        for record in records:
            if record.group_size is not None:
                return record.group_size, group_arg
        sizes = self._meta.pg_sizes
        for record in records:
            if record.pg is not None and record.pg in sizes:
                return sizes[record.pg], pg_config
        implied = next((c.shape_group for c in (*records, *calls) if c.shape_group), None)
        if implied is not None:
            return implied, shape
        if len(sizes) == 1 and all(r.pg is None for r in records):
            return next(iter(sizes.values())), pg_config
        return self._meta.world_size, world if self._meta.world_size is not None else None

    def finish(self) -> None:
        """Resolve what waited for the whole file and flush the open CPU runs."""
        for kernels in self._pending.values():
            self._resolve(kernels)
        self._pending.clear()
        self._ready.clear()
        self._waiting = 0
        if self._calls.missed:
            self.drop(_EARLY, self._calls.missed)
        for facts in [*self._gloo_alltoall.paired(), *self._waiting_meta]:
            self.out.append(self._comm_op(facts, [facts], on_gpu=False))
        self._waiting_meta.clear()
        self._gloo_p2p(self._p2p.finish())
        if self._p2p.early:
            self.drop(_EARLY, self._p2p.early)
        self._p2p = HeldSpans()
        self._busy.close_all(self.out)
        self._calling.close_all(self.out)
        for device, allocated in sorted(self._allocated.items()):
            self.out.append(MemoryPeak(device, allocated, self._reserved.get(device)))
        self._allocated.clear()
        self._reserved.clear()
        self.out.extend(self._names.events())
        self._names = KernelNames()
        self._links.finish()
        self._links = Launches(self.out)
        self.stats.lookalikes = longest(self._lookalikes, LOOKALIKE_NAMES)


def kernel_kind(name: str) -> KernelCategory | Special | None:
    """None for a communication kernel, a `Special` for a fused kernel or a compute kernel
    named like communication, else the compute kernel's category."""
    kind = role(name)
    if kind == "comm":
        return None
    category = kernel_category(name[:MAX_NAME])
    if kind == "fused":
        return Special(True, category)
    if kind is None and looks_like_comm(name):
        return Special(False, category, shown_name(name))
    return category


def longest(times: Mapping[str, int], count: int) -> dict[str, int]:
    """The `count` entries of largest time (ties: by name), in that order."""
    return dict(sorted(times.items(), key=lambda item: (-item[1], item[0]))[:count])


def _first_known(records: list[CommCall]) -> tuple[int | None, str | None, int | None]:
    """The first size, process group and sequence number that `records` give, in turn."""
    size = pg = seq = None
    for record in records:
        size = record.nelems_bytes if size is None else size
        pg = record.pg if pg is None else pg
        seq = record.seq if seq is None else seq
    return size, pg, seq


def _peer(
    collective: str,
    primary: CommCall,
    records: list[CommCall],
    groups: Mapping[str, Sequence[int]],
) -> Peers:
    """The peer fields of a SendRecv call: its direction from the gloo span's name or the
    first `Collective name` (send, isend, recv, irecv), its peer from the first record that
    names one, else the first group rank one names, through pg_config (`p2ppeers`)."""
    if collective != "SendRecv":
        return Peers()
    calls = (primary, *records)
    names = [GLOO_P2P.get(primary.name), *(r.collective_name for r in records)]
    way = way_of(next((n for n in names if n is not None), None))
    peer = next((r.peer for r in calls if r.peer is not None), None)
    inner = next((r for r in calls if r.group_peer is not None), None)
    if peer is None and inner is not None:
        peer = group_global(inner.group_peer, inner.pg, groups)
    if inner is None:
        return peers(way, peer)
    return peers(way, peer, inner.group_peer, inner.group_rank)


def _splits(records: list[CommCall]) -> Splits:
    """The split sizes (sent, received) of the record that holds the most entries (a
    record_param_comms' whole lists over its kernel's cut ones), the first of equals."""
    found = [(record.in_splits, record.out_splits) for record in records]
    return max(found, key=lambda s: len(s[0]) + len(s[1]), default=((), ()))


def _own_calls(calls: list[CommCall]) -> list[CommCall]:
    """The calls of this collective: those inside the second record_param_comms out (an
    outer, coalesced record, and what encloses it, speak for several calls)."""
    seen = False
    for index, call in enumerate(calls):
        if call.name == "record_param_comms":
            if seen:
                return calls[:index]
            seen = True
    return calls


def collective_of(
    primary: CommCall, records: list[CommCall], calls: list[CommCall]
) -> CollectiveType:
    """What names the collective: `Collective name`, else the enclosing backend call
    (`nccl:<op>`, `gloo:`, `hccl:`, `xccl:`), else a c10d op that names one, else the kernel
    name — but a kernel named SendRecv alone is of unknown type ("Other"): NCCL runs its
    all-to-all, and in some builds every collective, as a SendRecv kernel."""
    for record in records:
        if record.collective_name is not None:
            return collective_type(record.collective_name)
    for call in calls:
        if call.name.startswith(BACKEND_CALL_PREFIXES):
            return collective_type(call.name)
    for call in calls:
        if call.name.startswith(_C10D_PREFIXES) and (kind := collective_type(call.name)) != "Other":
            return kind
    kind = kernel_collective(primary.name)
    return "Other" if kind == "SendRecv" and is_comm_kernel(primary.name) else kind


def _size_from_calls(calls: list[CommCall], collective: str, group: int | None) -> int | None:
    """S from the comm calls' `Input Dims`, innermost first: a call whose first input is the
    message itself wins over one whose first input is a shard (S = shard x group size)."""
    scaled = None
    for call in calls:
        size, sharded = _message_from_dims(call, collective)
        if size is not None and not sharded:
            return size
        if size is not None and scaled is None and group is not None:
            scaled = size * group
    return scaled


def _message_from_dims(call: CommCall, collective: str) -> tuple[int | None, bool]:
    """(bytes of the call's first input, whether that input is a shard of the message).

    Backend ops (`nccl:*`, `gloo:*`, record_param_comms) record the input: an AllGather's is
    the shard. c10d ops take the output first: a ReduceScatter's is the shard.
    """
    own = collective
    if call.name != "record_param_comms" or call.collective_name is not None:
        own = collective_type(call.collective_name or call.name)
    sharded = own == "AllGather" if call.backend else own == "ReduceScatter"
    return call.dims_bytes, sharded


def _pg(args: Mapping[str, Any]) -> str | None:
    return _label(args.get("Process Group Name"))


def _label(value: object) -> str | None:
    """A name a trace gives (a process group, a GPU): a short string or an integer."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    text = str(value)
    return _known_label(text) if len(text) <= 2 * MAX_LABEL else _label_text(text)


@functools.lru_cache(maxsize=4096)  # a trace repeats its few group names
def _known_label(text: str) -> str | None:
    return _label_text(text)


def _label_text(text: str) -> str | None:
    text = text.strip()
    return text if 0 < len(text) <= MAX_LABEL and _LABEL.match(text) else None


def _meta_from_top(top: Mapping[str, Any]) -> TraceMeta:
    """TraceMeta from a trace's top-level keys (missing, odd or out-of-range values are
    None; an empty GPU name is no name)."""
    info = top.get("distributedInfo")
    info = info if isinstance(info, dict) else {}
    devices = top.get("deviceProperties")
    first = devices[0] if isinstance(devices, list) and devices else None
    backend = info.get("backend")
    pg_sizes, pg_ranks = _process_groups(info.get("pg_config"))
    return TraceMeta(
        rank=_bounded(_int(info.get("rank")), MAX_RANKS - 1),
        world_size=_bounded(_int(info.get("world_size")), MAX_RANKS, least=1),
        backend=_label(backend) if isinstance(backend, str) else None,
        gpu_name=_label(first.get("name")) if isinstance(first, dict) else None,
        base_time_ns=_bounded(_int(top.get("baseTimeNanoseconds")), 2**62),
        nccl_version=_label(info.get("nccl_version")),
        pg_sizes=pg_sizes,
        pg_ranks=pg_ranks,
    )


def _process_groups(pgs: object) -> tuple[dict[str, int], dict[str, list[int]]]:
    """pg_sizes and pg_ranks from `distributedInfo.pg_config` (at most MAX_GROUPS groups)."""
    pg_sizes: dict[str, int] = {}
    pg_ranks: dict[str, list[int]] = {}
    for pg in pgs[:MAX_GROUPS] if isinstance(pgs, list) else ():
        name = _label(pg.get("pg_name")) if isinstance(pg, dict) else None
        if name is None:
            continue
        size = _bounded(_int(pg.get("pg_size")), MAX_RANKS, least=1)
        if size is not None:
            pg_sizes[name] = size
        ranks = pg.get("ranks")
        if isinstance(ranks, list) and len(ranks) <= MAX_RANKS and _all_ranks(ranks):
            pg_ranks[name] = sorted(ranks)
    return pg_sizes, pg_ranks


def _all_ranks(values: list[Any]) -> bool:
    return all(_bounded(_int(v), MAX_RANKS - 1) is not None for v in values)


def _merge_meta(first: TraceMeta, later: TraceMeta) -> TraceMeta:
    """Field by field, the first known value."""
    fields = {
        name: getattr(first, name)
        if getattr(first, name) not in (None, {})
        else getattr(later, name)
        for name in first.__struct_fields__
    }
    return TraceMeta(**fields)


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ns(us: float) -> int:
    """µs → ns as `round(us * 1000)` gives, without `round`'s cost on an integer."""
    return us * 1000 if type(us) is int else round(us * 1000)


def _bounded(value: int | None, high: int, least: int = 0) -> int | None:
    return value if value is not None and least <= value <= high else None


def string_tid(tid: str) -> int:
    """A decimal string as its number (above NAMED_TIDS, within int64); any other string as a
    name: an id of its own at or below NAMED_TIDS, the same for the same name in every file
    and run (62 bits of its blake2b hash)."""
    if _DECIMAL.fullmatch(tid) is not None and NAMED_TIDS < int(tid) < 2**63:
        return int(tid)
    digest = hashlib.blake2b(tid.encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return NAMED_TIDS - (int.from_bytes(digest, "big") >> 2)
