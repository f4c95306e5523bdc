"""The daemons' logging helpers."""

from __future__ import annotations

from commscope.service.logs import sparse


def test_a_repeated_event_is_logged_at_1_10_100_1000_then_every_10000() -> None:
    assert [n for n in range(1, 30_001) if sparse(n)] == [1, 10, 100, 1000, 10_000, 20_000, 30_000]
