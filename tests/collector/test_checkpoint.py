"""The collector's checkpoint file: its encoding pinned byte for byte, version 1 (a bare map of
path to entry, before STATE_VERSION) migrated by its version, and unreadable ones refused with
a reason."""

from __future__ import annotations

import msgspec
import pytest
from commscope.collector.session import dump_checkpoint, load_checkpoint
from commscope.model.errors import ProtocolError
from commscope.model.schema import STATE_VERSION, CheckpointEntry

PATH = "/run/it_4/rank0_trace.json.gz"
ENTRY = CheckpointEntry(
    stream="0123456789abcdef0123456789abcdef", fingerprint_bytes=5000, acked=3, done=False
)
# msgpack, by hand: 82 (map of 2) a7 "version" 02 a5 "files" 81 (map of 1) bd (str of 29)
# PATH 84 (map of 4) a6 "stream" d9 20 (str8 of 32) STREAM b1 "fingerprint_bytes" cd 1388
# (uint16 5000) a5 "acked" 03 a4 "done" c2 (false)
GOLDEN_V2 = bytes.fromhex(
    "82a776657273696f6e02a566696c657381bd2f72756e2f69745f342f72616e6b305f74726163652e6a736f"
    "6e2e677a84a673747265616dd9203031323334353637383961626364656630313233343536373839616263"
    "646566b166696e6765727072696e745f6279746573cd1388a561636b656403a4646f6e65c2"
)
GOLDEN_V1 = GOLDEN_V2[len(bytes.fromhex("82a776657273696f6e02a566696c6573")) :]  # the bare map


def test_the_checkpoint_is_encoded_as_pinned() -> None:
    assert STATE_VERSION == 2
    assert dump_checkpoint({PATH: ENTRY}) == GOLDEN_V2


def test_version_2_reads_back() -> None:
    assert load_checkpoint(GOLDEN_V2) == {PATH: ENTRY}


def test_version_1_a_bare_map_is_migrated() -> None:
    assert msgspec.msgpack.encode({PATH: ENTRY}) == GOLDEN_V1  # what the old collector wrote
    assert load_checkpoint(GOLDEN_V1) == {PATH: ENTRY}


def test_an_empty_version_1_checkpoint_is_no_files() -> None:
    assert load_checkpoint(msgspec.msgpack.encode({})) == {}


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (msgspec.msgpack.encode({"version": 3, "files": {}}), "checkpoint version 3 is not one"),
        (msgspec.msgpack.encode({"version": 0, "files": {}}), "checkpoint version 0 is not one"),
        (msgspec.msgpack.encode([1, 2]), "a list, not a map"),
        (b"\xc1", "unreadable checkpoint"),
        (msgspec.msgpack.encode({PATH: {"stream": 5}}), "unreadable checkpoint"),
        (msgspec.msgpack.encode({"version": 2, "files": {PATH: {"acked": -1}}}), "unreadable"),
    ],
    ids=["newer", "zero", "not a map", "not msgpack", "v1 wrong shape", "v2 wrong shape"],
)
def test_an_unusable_checkpoint_is_refused_with_a_reason(data: bytes, says: str) -> None:
    with pytest.raises(ProtocolError, match=says):
        load_checkpoint(data)
