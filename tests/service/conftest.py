"""Fixtures of the service tests: real processes, always cleaned up."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from service.harness import Processes


@pytest.fixture
def procs(tmp_path: Path) -> Iterator[Processes]:
    started = Processes(tmp_path)
    yield started
    started.cleanup()
