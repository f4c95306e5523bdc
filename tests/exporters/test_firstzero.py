"""Counters a scrape first sees at 0: the pure `FirstZero` stages and `Published` over a fake
sequence of publications and scrapes (no server, no thread)."""

from __future__ import annotations

from commscope.exporters.firstzero import FirstZero
from commscope.exporters.metricnames import Family
from commscope.exporters.publish import Published, family
from hypothesis import given
from hypothesis import strategies as st
from prometheus_client.core import HistogramMetricFamily, Metric

OPS = Family("commscope_collective_ops_total", "counter", ("job", "collective"), "ops")
RANKS = Family("commscope_ranks", "gauge", ("job",), "ranks")
BUSBW = Family("commscope_op_busbw", "histogram", ("job",), "busbw")


def metrics(ops: dict[str, float], ranks: float = 2.0) -> list[Metric]:
    counter, gauge = family(OPS), family(RANKS)
    for kind, value in ops.items():
        counter.add_metric(["j", kind], value)  # type: ignore[call-arg]
    gauge.add_metric(["j"], ranks)  # type: ignore[call-arg]
    return [counter, gauge]


def values(served: list[Metric]) -> dict[str, float]:
    """Sample name (with its collective) -> value."""
    return {s.name + s.labels.get("collective", ""): s.value for m in served for s in m.samples}


def scrape(published: Published) -> dict[str, float]:
    return values(list(published.collect()))


def test_a_new_counter_series_is_held_at_0_and_a_gauge_is_not() -> None:
    gate = FirstZero()
    stage = gate.stage(metrics({"AllReduce": 5.0}, ranks=3.0))
    assert values(stage.held) == {"commscope_collective_ops_totalAllReduce": 0.0,
                                  "commscope_ranks": 3.0}  # fmt: skip
    assert values(stage.values)["commscope_collective_ops_totalAllReduce"] == 5.0
    assert stage.new == {("commscope_collective_ops", (("collective", "AllReduce"), ("job", "j")))}
    gate.scraped(stage.new)
    again = gate.stage(metrics({"AllReduce": 9.0}))
    assert again.new == frozenset() and again.held is again.values


def test_a_histogram_series_is_held_whole_at_0() -> None:
    made = family(BUSBW)
    assert isinstance(made, HistogramMetricFamily)
    made.add_metric(["j"], [("1", 2.0), ("+Inf", 3.0)], 7.5)
    stage = FirstZero().stage([made])
    assert [s.value for s in stage.held[0].samples] == [0.0] * 4  # 2 buckets, count, sum
    assert [s.value for s in stage.values[0].samples] == [2.0, 3.0, 3.0, 7.5]
    assert len(stage.new) == 1  # one series: `le` is not part of it


def test_each_series_is_served_at_0_for_one_scrape_then_its_value() -> None:
    """The first window of AllReduce at start, AllGather appearing later, a publication
    between scrapes: every counter is scraped at 0 once before its value, none goes back."""
    ar, ag = "commscope_collective_ops_totalAllReduce", "commscope_collective_ops_totalAllGather"
    published = Published([OPS, RANKS], metrics({"AllReduce": 4.0}))
    assert scrape(published)[ar] == 0.0
    assert scrape(published)[ar] == 4.0
    published.publish(metrics({"AllReduce": 6.0, "AllGather": 2.0}))
    published.publish(metrics({"AllReduce": 8.0, "AllGather": 3.0}))  # no scrape between
    first = scrape(published)
    assert (first[ar], first[ag]) == (8.0, 0.0)
    assert scrape(published)[ag] == 3.0
    published.publish(metrics({"AllReduce": 8.0, "AllGather": 5.0}))
    assert scrape(published)[ag] == 5.0  # shown at 0 once: never held again


def test_a_series_published_but_never_scraped_is_still_held() -> None:
    published = Published([OPS, RANKS], metrics({}))
    scrape(published)
    published.publish(metrics({"AllReduce": 1.0}))
    published.publish(metrics({"AllReduce": 2.0}))
    assert [scrape(published)["commscope_collective_ops_totalAllReduce"] for _ in range(3)] == [
        0.0, 2.0, 2.0,
    ]  # fmt: skip


@given(
    st.lists(
        st.one_of(
            st.just("scrape"),
            st.dictionaries(
                st.sampled_from(["AllReduce", "AllGather", "Broadcast"]),
                st.integers(1, 5),
                max_size=3,
            ),
        ),
        max_size=12,
    )
)
def test_counters_never_go_back_and_two_scrapes_show_the_last_values(steps: list[object]) -> None:
    """Oracle: any sequence of publications (cumulative counts, so each adds to the last) and
    scrapes. Every series is scraped at 0 before any other value, scraped values never
    decrease, and two scrapes after the last publication show its values exactly."""
    totals: dict[str, float] = {}
    published = Published([OPS, RANKS], metrics({}))
    seen: dict[str, list[float]] = {}
    for step in [*steps, "scrape", "scrape"]:
        if step == "scrape":
            for name, value in scrape(published).items():
                seen.setdefault(name, []).append(value)
            continue
        assert isinstance(step, dict)
        for kind, add in step.items():
            totals[kind] = totals.get(kind, 0.0) + add
        published.publish(metrics(totals))
    for name, history in seen.items():
        if name.startswith("commscope_collective_ops_total"):
            assert history[0] == 0.0 and history == sorted(history)
    last = scrape(published)
    assert {k: v for k, v in last.items() if k != "commscope_ranks"} == {
        f"commscope_collective_ops_total{kind}": value for kind, value in totals.items()
    }


def test_the_same_family_objects_published_again_are_served_as_they_are() -> None:
    """The aggregator serves its report's families as the same objects until the next report:
    once shown, they are served untouched; an object with a new series is held again."""
    same = metrics({"AllReduce": 4.0})
    gate = FirstZero()
    gate.scraped(gate.stage(same).new)
    again = gate.stage(same)
    assert again.held is same and again.new == frozenset()
    grown = metrics({"AllReduce": 4.0, "Broadcast": 1.0})
    assert values(gate.stage(grown).held)["commscope_collective_ops_totalBroadcast"] == 0.0
