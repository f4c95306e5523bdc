"""Fixtures of the service tests: real processes, always cleaned up; an aggregator in this
process, on a clock that stands still."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from commscope.service.aggregate import Aggregator, AggregatorSettings

from service.harness import Live, Processes


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.cleanup()


@pytest.fixture
def live(procs: Processes, tmp_path: Path) -> Callable[..., Live]:
    """Starts the aggregator of a live test, with its flags (`Live`)."""
    return lambda *flags: Live(procs, tmp_path, *flags)


@pytest.fixture
def agg(tmp_path: Path) -> Iterator[Aggregator]:
    """An aggregator driven in this process (`receive`, `commit`), its clock at 1000 s."""
    settings = AggregatorSettings(
        listen="tcp://127.0.0.1:*", out=tmp_path / "out", state=tmp_path / "st"
    )
    aggregator = Aggregator(settings, clock=lambda: 1000.0)
    yield aggregator
    aggregator.store.close()
