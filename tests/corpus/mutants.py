"""Seeded mutants of real and hand-made Kineto traces: what traces in the wild (and damaged
files) look like to the reader.

`corpus(seed, count)` yields `Mutant`s: byte-level damage (cut short, bytes flipped, invalid
UTF-8, a BOM, NaN or Infinity literals, integers beyond 64 bits), event-level changes
(events duplicated, removed or shuffled, a field of the wrong type anywhere, metadata of the
wrong type), and fixed specials (empty files, an empty gzip, JSON that is a list or a number,
deep nesting, a gzip bomb, a huge string). The same seed gives the same corpus.
"""

from __future__ import annotations

import gzip
import json
import random
import re
import struct
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any, Final

from kineto_builder import (
    annotation,
    collective_args,
    cpu_op,
    dims_args,
    dist_head,
    kernel,
    launch,
    trace,
)
from tools import shared_traces

ROOT: Final = Path(__file__).resolve().parents[2]
SHARED: Final = shared_traces("kineto")
DLRM: Final = SHARED / "dlrm_8rank_v100"
SAMPLE: Final = ROOT / "samples" / "gloo_ddp_2rank" / "iteration_4" / "rank0_trace.json.gz"
NUMBER: Final = re.compile(rb"(?<=[:\[ ,])-?\d+(?:\.\d+)?(?=[,\]}\s])")
STRING: Final = re.compile(rb'"[^"\\]{3,}"')
WRONG: Final = (None, True, -1, 2**70, 1e308, -1e-300, "", "x" * 300, [], [[1]], {}, {"a": 1})


@dataclass(frozen=True)
class Mutant:
    name: str  # what was done, to which base (a file name stem)
    data: bytes
    gz: bool = False  # written as .json.gz


@dataclass(frozen=True)
class Base:
    name: str
    doc: dict[str, Any]  # the parsed document (events mutated on copies)

    def dumps(self, doc: dict[str, Any] | None = None) -> bytes:
        return self.data if doc is None else json.dumps(doc, indent=1).encode()

    @cached_property
    def data(self) -> bytes:
        """The document as the corpus writes it, encoded once (json's indenting encoder is
        pure Python: slow on the DLRM rank)."""
        return json.dumps(self.doc, indent=1).encode()


def handmade() -> dict[str, Any]:
    """A small NCCL trace touching most of the reader: a step, compute, copies, a record,
    annotations with Input Dims, launches, kernels with and without args, memory events."""
    tid, rec = 11, collective_args("allreduce", 1024, 1024, "Float", **{"Group size": 4})
    events = [
        annotation("ProfilerStep#3", 0, 500, tid),
        cpu_op("aten::mm", 1, 20, tid),
        cpu_op("record_param_comms", 30, 40, tid, rec),
        annotation("nccl:all_reduce", 32, 30, tid, dims_args([[1024]], ["float"])),
        launch(7, 35, tid),
        kernel("ampere_sgemm_128x64_nn", 5, 30),
        kernel("ncclDevKernel_AllReduce_Sum_f32_RING_LL", 40, 25, {"correlation": 7}),
        kernel(
            "ncclDevKernel_AllGather_RING_LL",
            80,
            5,
            collective_args("_allgather_base", 10, 40, "BFloat16"),
        ),
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 90, "dur": 3, "tid": 7},
        {
            "ph": "i",
            "cat": "cpu_instant_event",
            "name": "[memory]",
            "ts": 2,
            "pid": 0,
            "tid": tid,
            "args": {"Device Id": 0, "Device Type": 1, "Total Allocated": 4096},
        },
    ]
    doc: dict[str, Any] = json.loads(trace(events, dist_head(rank=0, world_size=4, gpu="H100")))
    doc["baseTimeNanoseconds"] = 1_700_000_000 * 10**9
    return doc


def bases() -> list[Base]:
    found = [Base("handmade", handmade())]
    if SAMPLE.exists():
        found.append(Base("gloo", json.loads(gzip.decompress(SAMPLE.read_bytes()))))
    dlrm = sorted(DLRM.glob("worker0_*.json"))
    if dlrm:
        found.append(Base("dlrm", json.loads(dlrm[0].read_bytes())))
    return found


# ------------------------------------------------------------------ byte-level damage


def cut(rng: random.Random, data: bytes) -> bytes:
    return data[: rng.randrange(len(data))]


def flip(rng: random.Random, data: bytes) -> bytes:
    out = bytearray(data)
    for _ in range(rng.randint(1, 6)):
        out[rng.randrange(len(out))] = rng.randrange(256)
    return bytes(out)


def bad_utf8(rng: random.Random, data: bytes) -> bytes:
    return _in_a_string(rng, data, rng.choice([b"\xff\xfe", b"\xc3", b"\xed\xa0\x80"]))


def control_char(rng: random.Random, data: bytes) -> bytes:
    return _in_a_string(rng, data, rng.choice([b"\x00", b"\x01", b"\n"]))


def _in_a_string(rng: random.Random, data: bytes, inserted: bytes) -> bytes:
    strings = list(STRING.finditer(data))
    if not strings:
        return data + inserted
    at = rng.choice(strings).start() + 2
    return data[:at] + inserted + data[at:]


def bom(rng: random.Random, data: bytes) -> bytes:
    return b"\xef\xbb\xbf" + data


def _number(rng: random.Random, data: bytes, literal: bytes) -> bytes:
    numbers = list(NUMBER.finditer(data))
    if not numbers:
        return data
    found = rng.choice(numbers)
    return data[: found.start()] + literal + data[found.end() :]


def huge_number(rng: random.Random, data: bytes) -> bytes:
    literal = rng.choice([b"10159970886766084423", b"-99999999999999999999999", b"1e400",
                          b"1" * 5000, b"-0.0000000001e-400"])  # fmt: skip
    return _number(rng, data, literal)


def nan_or_infinity(rng: random.Random, data: bytes) -> bytes:
    return _number(rng, data, rng.choice([b"NaN", b"Infinity", b"-Infinity"]))


BYTE_DAMAGE: Final[tuple[Callable[[random.Random, bytes], bytes], ...]] = (
    cut, flip, bad_utf8, control_char, bom, huge_number, nan_or_infinity,
)  # fmt: skip


# ------------------------------------------------------------------ event-level changes


def _events(doc: dict[str, Any]) -> list[Any]:
    events = doc.get("traceEvents")
    return events if isinstance(events, list) else []


def duplicate(rng: random.Random, doc: dict[str, Any]) -> None:
    events = _events(doc)
    for _ in range(rng.randint(1, 20)):
        if events:
            events.insert(rng.randrange(len(events) + 1), rng.choice(events))


def remove(rng: random.Random, doc: dict[str, Any]) -> None:
    events = _events(doc)
    for _ in range(rng.randint(1, max(1, len(events) // 3))):
        if events:
            events.pop(rng.randrange(len(events)))


def shuffle(rng: random.Random, doc: dict[str, Any]) -> None:
    rng.shuffle(_events(doc))


def wrong_field(rng: random.Random, doc: dict[str, Any]) -> None:
    """A field of one event (or of its args) holds a value of the wrong type."""
    events = [e for e in _events(doc) if isinstance(e, dict)]
    if not events:
        return
    event = rng.choice(events)
    target = event
    if isinstance(event.get("args"), dict) and event["args"] and rng.random() < 0.5:
        target = event["args"]
    key = rng.choice([*target, "ts", "dur", "cat", "name", "ph", "tid", "args"])
    target[key] = rng.choice(WRONG)


def wrong_metadata(rng: random.Random, doc: dict[str, Any]) -> None:
    """A top-level key (distributedInfo and its fields, deviceProperties, the time base, or
    traceEvents itself) holds a value of the wrong type."""
    info = doc.get("distributedInfo")
    where: list[tuple[dict[str, Any], str]] = [(doc, key) for key in doc]
    if isinstance(info, dict):
        where += [(info, key) for key in (*info, "rank", "world_size", "pg_config")]
    devices = doc.get("deviceProperties")
    if isinstance(devices, list) and devices and isinstance(devices[0], dict):
        where.append((devices[0], "name"))
    table, key = rng.choice(where)
    table[key] = rng.choice(WRONG)


EVENT_CHANGES: Final[tuple[Callable[[random.Random, dict[str, Any]], None], ...]] = (
    duplicate, remove, shuffle, wrong_field, wrong_field, wrong_metadata,
)  # fmt: skip


# ------------------------------------------------------------------ specials


def gzip_bomb(inflated: int = 800 * 2**20) -> bytes:
    """A kernel whose name is `inflated` bytes of 'a': a few hundred KB compressed. Each 1 MiB
    block is deflated after a full flush (no history), so its bytes are the same every time:
    deflated once and repeated, with the gzip trailer's CRC-32 and size over what it inflates to
    (RFC 1952)."""
    head, block = b'{"traceEvents": [{"ph": "X", "cat": "kernel", "name": "', b"a" * 2**20
    tail, count = b'", "ts": 1, "dur": 1}]}', inflated // len(block)
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)  # -15: a raw deflate stream
    first = packer.compress(head) + packer.flush(zlib.Z_FULL_FLUSH)
    again = packer.compress(block) + packer.flush(zlib.Z_FULL_FLUSH)
    last = packer.compress(tail) + packer.flush()
    crc = zlib.crc32(head)
    for _ in range(count):
        crc = zlib.crc32(block, crc)
    size = len(head) + count * len(block) + len(tail)
    trailer = struct.pack("<II", zlib.crc32(tail, crc), size % 2**32)
    return b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff" + first + again * count + last + trailer


def specials() -> Iterator[Mutant]:
    deep_list = b'{"traceEvents": [{"args": ' + b"[" * 100_000 + b"]" * 100_000 + b"}]}"
    deep_object = b'{"traceEvents": [' + b'{"a":' * 50_000 + b"1" + b"}" * 50_000 + b"]}"
    plain = {
        "empty": b"",
        "whitespace": b"  \n ",
        "list": b"[1, 2, 3]",
        "number": b"42",
        "string": b'"traceEvents"',
        "null": b"null",
        "empty-object": b"{}",
        "events-a-number": b'{"traceEvents": 5}',
        "events-an-object": b'{"traceEvents": {"ph": "X"}}',
        "events-of-scalars": b'{"traceEvents": [1, "x", null, [], true]}',
        "deep-list": deep_list,
        "deep-object": deep_object,
        "huge-string": b'{"traceEvents": [{"name": "' + b"x" * 20 * 2**20 + b'"}]}',
        "utf16": '{"traceEvents": []}'.encode("utf-16"),
        "binary": bytes(range(256)) * 64,
    }
    for name, data in plain.items():
        yield Mutant(f"special-{name}", data)
    yield Mutant("special-empty-gzip", gzip.compress(b""), gz=True)
    yield Mutant("special-gzip-header-only", b"\x1f\x8b", gz=True)
    yield Mutant("special-gzip-bomb", gzip_bomb(), gz=True)


def corpus(seed: int, count: int) -> Iterator[Mutant]:
    """The specials, then `count` seeded mutants of the bases (the same seed, the same files)."""
    yield from specials()
    rng = random.Random(seed)
    found = bases()
    for number in range(count):
        base = rng.choice(found)
        yield _mutant(rng, base, number)


def _mutant(rng: random.Random, base: Base, number: int) -> Mutant:
    data = base.dumps()
    done = []
    if rng.random() < 0.6:
        doc = json.loads(data)
        change = rng.choice(EVENT_CHANGES)
        change(rng, doc)
        done.append(change.__name__)
        data = base.dumps(doc)
    if not done or rng.random() < 0.5:
        damage = rng.choice(BYTE_DAMAGE)
        data = damage(rng, data)
        done.append(damage.__name__)
    gz = rng.random() < 0.3
    if gz:
        data = gzip.compress(data, mtime=0)
        if rng.random() < 0.3:
            data, done = cut(rng, data), [*done, "gzip-cut"]
    return Mutant(f"{number:04d}-{base.name}-{'+'.join(done)}", data, gz)
