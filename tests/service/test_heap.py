"""The aggregator's GC policy (`service.heap.Freezer`): what is alive after a report is frozen
out of the cyclic collector's walks; every `full_every` reports everything is collected once,
so a cycle frozen with the rest is freed then, not never."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Iterator

import pytest
from commscope.service.heap import FULL_EVERY, FULL_SHARE, THRESHOLDS, Freezer


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


class FakeCPU:
    """The process's CPU seconds: advanced by hand, and by `cost` during each full collection."""

    def __init__(self, cost: float) -> None:
        self.now, self.cost = 0.0, cost

    def __call__(self) -> float:
        return self.now


def test_a_full_collection_waits_until_the_cpu_since_the_last_paid_for_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The heap grew: the last full collection took 2 s of CPU. With FULL_SHARE 5%, the next
    waits until 40 s of CPU were spent since, though FULL_EVERY reports passed long before;
    then it comes at the next report."""
    cpu = FakeCPU(cost=2.0)

    def collect() -> int:
        cpu.now += cpu.cost
        return 0

    monkeypatch.setattr(gc, "collect", collect)
    freezer = Freezer(full_every=2, clock=cpu)
    assert FULL_SHARE == 0.05
    freezer.after_report()
    cpu.now += 1.0
    freezer.after_report()  # 2 reports, the first collection costs nothing to wait for
    assert freezer.collections == 1
    for _ in range(10):  # 10 reports and 38 s of CPU later: not yet
        cpu.now += 3.8
        freezer.after_report()
    assert freezer.collections == 1
    cpu.now += 2.5  # 40.5 s since
    freezer.after_report()
    assert freezer.collections == 2


def test_a_cheap_full_collection_still_waits_for_its_reports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cpu = FakeCPU(cost=0.0)
    monkeypatch.setattr(gc, "collect", lambda: 0)
    freezer = Freezer(full_every=3, clock=cpu)
    counts = []
    for _ in range(7):
        cpu.now += 100.0
        freezer.after_report()
        counts.append(freezer.collections)
    assert counts == [0, 0, 1, 1, 1, 2, 2]


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
