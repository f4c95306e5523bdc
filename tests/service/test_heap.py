"""The aggregator's GC policy (`service.heap.Freezer`): what is alive after a report is frozen
out of the cyclic collector's walks; every `full_every` reports everything is collected once,
so a cycle frozen with the rest is freed then, not never."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from commscope.service.heap import FULL_EVERY, THRESHOLDS, Freezer


class Node:
    def __init__(self) -> None:
        self.me = self  # a cycle: only the cyclic collector frees it


@pytest.fixture(autouse=True)
def unfrozen() -> Iterator[None]:
    thresholds = gc.get_threshold()
    gc.unfreeze()
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)


def test_a_report_freezes_what_is_alive() -> None:
    Freezer().after_report()
    assert gc.get_freeze_count() > 0


def test_a_frozen_cycle_is_freed_at_the_next_full_collection_and_not_before() -> None:
    """full_every 3: a cycle alive at report 1 is frozen; dropped, a collection leaves it (the
    collector does not walk frozen objects) after report 2 too; report 3 collects it."""
    freezer = Freezer(full_every=3)
    cycle = Node()
    alive = weakref.ref(cycle)
    freezer.after_report()
    del cycle
    gc.collect()
    assert alive() is not None
    freezer.after_report()
    gc.collect()
    assert alive() is not None
    freezer.after_report()
    assert alive() is None


def test_a_full_collection_every_twenty_reports() -> None:
    assert Freezer().full_every == FULL_EVERY == 20


def test_the_daemon_collects_its_youngest_generation_every_10000_allocations() -> None:
    Freezer().start()
    assert gc.get_threshold() == THRESHOLDS == (10_000, 20, 20)


def test_stopped_the_heap_is_unfrozen_and_the_thresholds_as_before() -> None:
    """As `Aggregator.run` leaves them when it returns (a run inside a larger process)."""
    gc.set_threshold(700, 10, 10)
    freezer = Freezer()
    freezer.start()
    freezer.after_report()
    freezer.stop()
    assert (gc.get_threshold(), gc.get_freeze_count()) == ((700, 10, 10), 0)
