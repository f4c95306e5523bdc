"""Fixtures of the service tests: real processes, always cleaned up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

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
