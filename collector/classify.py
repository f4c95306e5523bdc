"""Classification of trace events per the metric contract (pure).

Which kernels communicate, which collective a name stands for, how many bytes a dtype has and
what it is called, which CPU ops are calls into a collective, and how a message size and an
all-to-all's split sizes follow from op args.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any, Final, TypeGuard

from commscope.collector.families import LIBRARIES, family_of
from commscope.model.schema import MAX_SPLITS, CollectiveType

# nccl-tests convention: a dtype's size in bytes, keyed by lower-cased name without `c10::`.
_DTYPE_BYTES: Final = {
    "float": 4,
    "float32": 4,
    "double": 8,
    "float64": 8,
    "half": 2,
    "float16": 2,
    "bfloat16": 2,
    "long": 8,
    "int64": 8,
    "long int": 8,
    "int": 4,
    "int32": 4,
    "short": 2,
    "short int": 2,
    "int16": 2,
    "char": 1,
    "byte": 1,
    "bool": 1,
    "unsigned char": 1,
    "signed char": 1,
    "int8": 1,
    "uint8": 1,
}

# A dtype's one name (PyTorch's ScalarType, what record_param_comms' `dtype` says), keyed as
# `_DTYPE_BYTES`: `Input type` gives caffe2's names for the same types (`long int`, `float`).
_DTYPE_NAMES: Final = {
    "float": "Float",
    "float32": "Float",
    "double": "Double",
    "float64": "Double",
    "half": "Half",
    "float16": "Half",
    "bfloat16": "BFloat16",
    "long": "Long",
    "int64": "Long",
    "long int": "Long",
    "int": "Int",
    "int32": "Int",
    "short": "Short",
    "short int": "Short",
    "int16": "Short",
    "char": "Char",
    "signed char": "Char",
    "int8": "Char",
    "byte": "Byte",
    "unsigned char": "Byte",
    "uint8": "Byte",
    "bool": "Bool",
    "complexfloat": "ComplexFloat",
    "complex<float>": "ComplexFloat",
    "complexdouble": "ComplexDouble",
    "complex<double>": "ComplexDouble",
    "complexhalf": "ComplexHalf",
    "complex<c10::half>": "ComplexHalf",
}
# Ordered: the first prefix that matches the squashed name wins.
_COLLECTIVE_PREFIXES: Final[tuple[tuple[str, CollectiveType], ...]] = (
    ("allreduce", "AllReduce"),
    ("allgather", "AllGather"),
    ("reducescatter", "ReduceScatter"),
    ("alltoall", "AllToAll"),
    ("broadcast", "Broadcast"),
    ("bcast", "Broadcast"),
    ("reduce", "Reduce"),
    ("sendrecv", "SendRecv"),
    ("send", "SendRecv"),
    ("recv", "SendRecv"),
    ("isend", "SendRecv"),
    ("irecv", "SendRecv"),
    ("batchisendirecv", "SendRecv"),
    ("p2p", "SendRecv"),
    ("barrier", "Barrier"),
)

# NCCL's kernels since 2.5 (`ncclDevKernel_AllReduce_Sum_f32_RING_LL`, `ncclKernel_SendRecv`)
# and before (`ncclAllReduceRingLLKernel_sum_f32`); RCCL's; HCCL's and XCCL's the same way.
_KERNEL_PREFIX = re.compile(rf"^(?:{'|'.join(LIBRARIES)})(?:(?:Dev)?Kernel_)?", re.IGNORECASE)
_NON_LETTERS = re.compile(r"[^a-z0-9]")

# Ops that name the collective library's call (user annotations, or cpu ops in old traces):
# NCCL/RCCL, gloo (its spans are the communication itself), HCCL (Ascend, MTIA), XCCL (XPU).
BACKEND_CALL_PREFIXES: Final = ("nccl:", "gloo:", "hccl:", "xccl:")
COMM_CALL_PREFIXES: Final = (
    "c10d::",
    "_c10d_functional",
    "record_param_comms",
    *BACKEND_CALL_PREFIXES,
)


def dtype_bytes(dtype: object) -> int | None:
    """Size of one element of `dtype`, or None when the name is unknown or missing."""
    if not isinstance(dtype, str):
        return None
    return _known_dtype(dtype) if len(dtype) <= _CACHED_NAME else _dtype_size(dtype)


@functools.lru_cache(maxsize=1024)
def _known_dtype(dtype: str) -> int | None:
    return _dtype_size(dtype)


def _dtype_size(dtype: str) -> int | None:
    name = dtype.strip().lower().removeprefix("c10::")
    if name.startswith("float8"):
        return 1
    return _DTYPE_BYTES.get(name)


def dtype_name(dtype: object) -> str | None:
    """A dtype's one name whichever spelling a trace uses (`c10::Half`, `half`, `Half` ->
    `Half`); a name outside the table keeps its own spelling, lower-cased without `c10::`
    (`Float8_e4m3fn` and `c10::Float8_e4m3fn` agree). None for a missing or blank name."""
    if not isinstance(dtype, str):
        return None
    name = dtype.strip().lower().removeprefix("c10::")
    return _DTYPE_NAMES.get(name, name) or None


def split_sizes(value: object) -> tuple[int, ...]:
    """An all-to-all's split sizes as recorded (`In split size` / `Out split size`: Kineto's
    string `"[4, 2, 0]"`, cut as `"[4, 2, ...]"` past 30 entries; the execution trace's whole
    list; or a JSON list): the first MAX_SPLITS entries, in group-rank order. Empty when none
    are recorded (an even split) or the value is not a list of counts below 2**62."""
    entries = _split_entries(value) if isinstance(value, str) else value
    if not isinstance(entries, list):
        return ()
    known = entries[:MAX_SPLITS]
    if all(_is_count(entry) and entry < 2**62 for entry in known):
        return tuple(known)
    return ()


def _split_entries(text: str) -> list[object] | None:
    body = text.strip()
    if not (body.startswith("[") and body.endswith("]")):
        return None
    parts = [part.strip() for part in body[1:-1].split(",", MAX_SPLITS)][:MAX_SPLITS]
    if parts and parts[-1] == "...":
        parts.pop()
    if parts == [""]:
        return []
    return [int(part) if part.isascii() and part.isdigit() and len(part) < 20 else part
            for part in parts]  # fmt: skip


def is_comm_kernel(name: str) -> bool:
    """A kernel of a family that communicates (`families.FAMILIES`): NCCL, RCCL, HCCL, XCCL
    (`nccl*`, …, in any case), DeepEP, NVSHMEM, custom all-reduce kernels, …"""
    found = family_of(name)
    return found is not None and found.family.role == "comm"


def kernel_collective(name: str) -> CollectiveType:
    """The collective type a communication kernel's name gives: its family's, else the name
    read as NCCL names its kernels (`collective_type`)."""
    found = family_of(name)
    if found is not None and found.collective is not None:
        return found.collective
    return collective_type(name)


def is_comm_call(name: str) -> bool:
    """A CPU op that is a call into a collective (its time is not compute)."""
    return name.startswith(COMM_CALL_PREFIXES) or "wait" in name.lower()


def collective_type(name: str) -> CollectiveType:
    """Collective type of a `Collective name`, kernel name or annotation name."""
    return _known_type(name) if len(name) <= _CACHED_NAME else _type_of(name)


_CACHED_NAME: Final = 256  # names worked out once each (4096 of them, ~1 MB at most)


@functools.lru_cache(maxsize=4096)
def _known_type(name: str) -> CollectiveType:
    return _type_of(name)


def _type_of(name: str) -> CollectiveType:
    kernel = None if ":" in name else _KERNEL_PREFIX.match(name)
    if kernel:
        base = name[kernel.end() :].split("_", 1)[0].split("(", 1)[0]
    else:
        base = name.rsplit(":", 1)[-1]
    squashed = _NON_LETTERS.sub("", base.lower())
    for prefix, kind in _COLLECTIVE_PREFIXES:
        if squashed.startswith(prefix):
            return kind
    return "Other"


def nelems_bytes(args: Mapping[str, Any]) -> int | None:
    """S from collective args: max(In msg nelems, Out msg nelems) x dtype size."""
    counts: list[int] = [
        v for v in (args.get("In msg nelems"), args.get("Out msg nelems")) if _is_count(v)
    ]
    size = dtype_bytes(args.get("dtype"))
    if not counts or size is None:
        return None
    return max(counts) * size


def input_dims_bytes(args: Mapping[str, Any]) -> int | None:
    """S from `Input Dims` (PyTorch 1.8: `Input dims`) x `Input type`: the first input,
    summed over a tensor list."""
    dims, types = _input_dims(args), args.get("Input type")
    if not isinstance(dims, list) or not isinstance(types, list) or not dims or not types:
        return None
    size, elements = dtype_bytes(types[0]), _numel(dims[0])
    return None if size is None or elements is None else elements * size


def _input_dims(args: Mapping[str, Any]) -> Any:
    dims = args.get("Input Dims")
    return dims if dims is not None else args.get("Input dims")


def shape_group(name: str, args: Mapping[str, Any]) -> int | None:
    """The group size one call's tensor shapes imply: an all-gather's output over its input,
    a reduce-scatter's input over its output (`In/Out msg nelems`, or the `Input Dims` of a
    c10d op, whose output comes first); None when they say nothing."""
    label = args.get("Collective name")
    kind = collective_type(label if isinstance(label, str) else name)
    if kind not in _SHARDED:
        return None
    sizes: tuple[int | None, int | None] = (None, None)
    counts = (args.get("In msg nelems"), args.get("Out msg nelems"))
    if _is_count(counts[0]) and _is_count(counts[1]):
        sizes = counts[0], counts[1]
    elif name.startswith("c10d::"):
        dims = _input_dims(args)
        if isinstance(dims, list) and len(dims) >= 2:
            sizes = _numel(dims[1]), _numel(dims[0])
    given, made = sizes
    whole, part = (made, given) if kind == "AllGather" else (given, made)
    if whole is None or not part or whole % part:
        return None
    return whole // part


_SHARDED: Final = frozenset({"AllGather", "ReduceScatter"})


def _numel(value: object) -> int | None:
    """Elements of a shape (`[4, 2]`), or summed over a list of shapes."""
    if not isinstance(value, list):
        return None
    if all(_is_count(extent) for extent in value):
        return _elements(value)
    total = 0
    for shape in value:
        found = _numel(shape)
        if found is None:
            return None
        total += found
    return total


def _elements(shape: list[Any]) -> int | None:
    count = 1
    for extent in shape:
        if not _is_count(extent):
            return None
        count *= extent
    return count


def _is_count(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0
