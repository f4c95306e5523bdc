"""int64 arrays as little-endian bytes, the wire's packing of long integer columns (pure)."""

from __future__ import annotations

from array import array
from typing import Final

_LITTLE: Final = array("q", [1]).tobytes()[0] == 1


def pack(values: array[int]) -> bytes:
    """int64 values as little-endian bytes."""
    if not _LITTLE:
        values = array("q", values)
        values.byteswap()
    return values.tobytes()


def unpack(data: bytes) -> array[int]:
    values = array("q")
    values.frombytes(data)
    if not _LITTLE:
        values.byteswap()
    return values
