"""Clock offsets from matched collectives' ends (`clocks.offsets`): exact on hand-worked group
structures where one process group's many same-clock instances meet another's few cross-host
ones, robust to a delayed end, the truth on a simulated TorchTitan-like job, and on random
structures within a bound that follows from the noise."""

from __future__ import annotations

import itertools
import math
import random
import statistics
from collections.abc import Mapping

import pytest
from commscope.pipeline import clocks, skew
from commscope.pipeline.matching import Instance
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_instances import instances as sim_instances
from sim_instances import true_offset_ns
from simjob import Job


def instance(group: str, position: int, ends: Mapping[int, int]) -> Instance:
    """An instance whose members all start 1000 ns before their end."""
    starts = {rank: end - 1000 for rank, end in ends.items()}
    return Instance(
        group, position, "AllReduce", 1024, len(ends), starts, dict.fromkeys(ends, 1000)
    )


def two_nodes(cross: int, delayed: Mapping[int, int] | None = None) -> list[Instance]:
    """Node A = ranks 0, 1 (clock +0), node B = ranks 2, 3 (clock +5000 ns). TP groups "a" {0, 1}
    and "b" {2, 3}, 10 instances each; "x" {1, 3} links the nodes with `cross` instances.
    Instance i ends at true time 10_000 x i; `delayed`: x instance -> extra ns on rank 3."""
    clock = {0: 0, 1: 0, 2: 5000, 3: 5000}
    found = []
    for i in range(10):
        found.append(instance("a", i, {r: 10_000 * i + clock[r] for r in (0, 1)}))
        found.append(instance("b", i, {r: 10_000 * i + 3 + clock[r] for r in (2, 3)}))
    for i in range(cross):
        late = (delayed or {}).get(i, 0)
        found.append(instance("x", i, {1: 7 + 10_000 * i, 3: 7 + 10_000 * i + 5000 + late}))
    return found


def offsets_ns(found: clocks.Found) -> dict[int, float]:
    return {rank: round(offset, 6) for rank, (offset, _, _) in found.items()}


def test_a_few_cross_node_instances_move_a_whole_node() -> None:
    # Rank 3's residuals: 10 of "b" (0: same clock as rank 2) and 2 of "x". Pooled, their
    # median is 0 and node B never moved (the old estimator's answer). Per group: "a" and "b"
    # say o1 = o0 and o3 = o2 exactly; "x" says o3 - o1 = 5000 exactly (ends 5000 apart in
    # both instances); so o = (0, 0, 5000, 5000) fits every group with no residual.
    found = clocks.offsets(two_nodes(cross=2))
    assert offsets_ns(found) == {0: 0, 1: 0, 2: 5000, 3: 5000}
    assert [samples for _, _, samples in found.values()] == [10, 12, 10, 12]


def test_a_delayed_end_does_not_move_the_offset() -> None:
    # "x" has 5 instances; in one, rank 3 ends 300 µs late. The median polish of "x": the
    # differences rank 3 - rank 1 are 5000, 5000, 305000, 5000, 5000, their median 5000.
    found = clocks.offsets(two_nodes(cross=5, delayed={2: 300_000}))
    assert offsets_ns(found) == {0: 0, 1: 0, 2: 5000, 3: 5000}


def test_each_connected_set_is_relative_to_its_lowest_rank() -> None:
    # {0, 1} and {2, 3} never meet ("x" absent): rank 2 is the reference of ranks 2 and 3,
    # whose clocks agree (o3 - o2 = 0); rank 4 is in no instance with another rank: offset 0,
    # no uncertainty (nothing measured it); each reference has offset 0 and uncertainty 0.
    found = clocks.offsets([*two_nodes(cross=0), instance("y", 0, {4: 123})])
    assert offsets_ns(found) == {0: 0, 1: 0, 2: 0, 3: 0, 4: 0}
    # The TP groups' ends agree exactly: their noise scale is the 100 ns floor, so the
    # s.e. of o1 - o0 is sqrt(2 x pi/2 x 100^2 / 10) = 56.05 ns (exact: 5 ranks <= DRAWS).
    spreads = [spread for _, spread, _ in found.values()]
    assert spreads[0] == spreads[2] == 0.0 and spreads[4] is None
    assert spreads[1] == spreads[3] == pytest.approx(56.05, abs=0.01)
    assert clocks.clocks(found).reference_rank == 0


def test_epoch_ends_keep_their_nanoseconds() -> None:
    # Ends near 1.7e18 ns (epoch times) are 256 ns apart as floats: differences are taken on
    # the integers first, so an offset of 7 ns is found exactly.
    epoch = 1_767_225_600_000_000_000
    found = [instance("x", i, {0: epoch + 10_000 * i, 1: epoch + 10_000 * i + 7}) for i in range(3)]
    assert offsets_ns(clocks.offsets(found)) == {0: 0, 1: 7}


# ---------------------------------------------------------------- the simulated job

SIM = Job(64)  # tp 8 (a node), pp 2, dp 4: FSDP groups of 4 ranks on 4 nodes


@pytest.fixture(scope="module")
def sim() -> tuple[list[Instance], clocks.Found]:
    found = sim_instances(SIM)
    return found, clocks.offsets(found)


def test_the_simulated_jobs_node_clocks_are_recovered(sim: tuple) -> None:
    # The simulation ends every member of a collective at the same true instant, read on its
    # node's clock (up to 400 µs off node 0's): the offsets are exact, but for float rounding.
    _, found = sim
    for rank, (offset, spread, _) in found.items():
        assert abs(offset - true_offset_ns(SIM, rank)) < 1.0
        assert spread is not None and spread < 1000
    assert len({true_offset_ns(SIM, r) for r in found}) == 8  # 8 nodes, 8 different clocks


def test_fsdp_skew_is_the_simulated_jitter(sim: tuple) -> None:
    # Members arrive at the nominal time plus a jitter below 30 µs (`Job.jitter_us`): on
    # aligned clocks an FSDP all-gather's skew is under 30 µs; on raw clocks it is the nodes'
    # offsets (hundreds of µs), what the old estimator left.
    found, offsets = sim
    shifts = {rank: offset for rank, (offset, _, _) in offsets.items()}
    fsdp = [i for i in found if i.collective == "AllGather" and i.group_size == SIM.dp]
    aligned = [skew.arrival(i, shifts).skew_ns for i in fsdp]
    raw = [skew.arrival(i, {}).skew_ns for i in fsdp]
    assert len(fsdp) == 256 and max(aligned) <= 30_000
    assert statistics.median(raw) > 300_000


# ---------------------------------------------------------------- random structures


@st.composite
def structures(draw: st.DrawFn) -> tuple[list[Instance], dict[int, int], int, int]:
    """Ranks on random nodes (a clock per node, within ±1 ms), random member sets of 2+ ranks
    with 1-12 instances each, ends = true end + node clock + uniform noise in ±`noise` ns,
    and in fewer than a quarter of a set's instances one member's end delayed by up to
    500 µs. Returns (instances, clock per rank, noise, number of member sets)."""
    ranks = draw(st.integers(2, 9))
    node = [draw(st.integers(0, ranks - 1)) for _ in range(ranks)]
    clock = {n: draw(st.integers(-1_000_000, 1_000_000)) for n in set(node)}
    sets = draw(st.lists(st.sets(st.integers(0, ranks - 1), min_size=2), min_size=1, max_size=6,
                         unique_by=lambda s: tuple(sorted(s))))  # fmt: skip
    noise = draw(st.sampled_from([0, 100, 2000]))
    rng = random.Random(draw(st.integers(0, 2**32)))
    found = []
    for k, members in enumerate(sets):
        count = draw(st.integers(1, 12))
        outliers = set(rng.sample(range(count), (count - 1) // 4))
        for i in range(count):
            ends = {r: 10**7 * i + clock[node[r]] + rng.randint(-noise, noise) for r in members}
            if i in outliers:
                ends[rng.choice(sorted(members))] += rng.randint(1, 500_000)
            found.append(instance(str(k), i, ends))
    return found, {r: clock[node[r]] for r in range(ranks)}, noise, len(sets)


@settings(max_examples=150, deadline=None)
@given(structures())
def test_random_structures_recover_the_offsets_within_the_noise_bound(
    case: tuple[list[Instance], dict[int, int], int, int],
) -> None:
    # Each member set's median polish puts a member's shift within 2 x noise of its truth
    # (relative to the set's centre): fewer than a quarter of its instances hold a delayed
    # end, so the median of its residuals lies among clean ones, each within ±2 x noise.
    # The joint fit is a weighted least-squares combination of the shifts; the difference of
    # two fitted offsets is a unit flow through the sets that link them, a path crossing at
    # most every set twice (in and out through a member), so its error is at most
    # 2 x sets x (2 x noise + 2 x noise) = 8 x noise x sets. Float rounding: 1 ns.
    found, clock, noise, sets = case
    estimated = clocks.offsets(found)
    links = clocks.components([i.ends() for i in found])
    for rank, (offset, _, _) in estimated.items():
        truth = clock[rank] - clock[links[rank]]
        assert abs(offset - truth) <= 8 * noise * sets + 1


def test_the_standard_error_is_the_spread_of_the_error() -> None:
    # Two nodes of two ranks, each with a TP group of 20 instances, linked by a group {1, 3}
    # of 6, ends with normal noise of 3 µs (above the 100 ns floor). Over 300 seeded draws,
    # error / reported s.e. should have an RMS of 1: with 300 draws its sampling spread is
    # about 1/sqrt(600) = 4%; the scale rests on few double differences and the median's
    # normal-theory variance is approximate for few instances: accepted between 0.7 and 1.4.
    rng = random.Random(7)
    clock = {0: 0, 1: 0, 2: 40_000, 3: 40_000}
    z = []
    for _ in range(300):
        found = []
        for name, members, count in (("a", (0, 1), 20), ("b", (2, 3), 20), ("x", (1, 3), 6)):
            for i in range(count):
                ends = {r: 10**6 * i + clock[r] + round(rng.gauss(0, 3000)) for r in members}
                found.append(instance(name, i, ends))
        offset, spread, _ = clocks.offsets(found)[3]
        assert spread is not None
        z.append((offset - clock[3]) / spread)
    rms = math.sqrt(math.fsum(v * v for v in z) / len(z))
    assert 0.7 < rms < 1.4


def test_the_drawn_standard_error_of_a_larger_job_is_the_spread_of_the_error() -> None:
    # Above DRAWS ranks the s.e. is estimated from 40 re-fits (11% relative error). 6 nodes
    # of 8 ranks, a TP group per node (16 instances), an FSDP-like group per local index
    # (ranks i, 8 + i, ..., 6 instances), normal noise of 3 µs; 20 seeded draws, the RMS of
    # error / s.e. over all 47 non-reference ranks, accepted between 0.7 and 1.4 as above.
    rng = random.Random(11)
    clock = {r: 50_000 * (r // 8) for r in range(48)}
    sets = [tuple(range(8 * n, 8 * n + 8)) for n in range(6)]
    sets += [tuple(range(i, 48, 8)) for i in range(8)]
    z = []
    for _ in range(20):
        found = []
        for k, members in enumerate(sets):
            for i in range(16 if len(members) == 8 else 6):
                ends = {r: 10**6 * i + clock[r] + round(rng.gauss(0, 3000)) for r in members}
                found.append(instance(str(k), i, ends))
        for rank, (offset, spread, _) in clocks.offsets(found).items():
            if rank:
                assert spread is not None
                z.append((offset - clock[rank]) / spread)
    rms = math.sqrt(math.fsum(v * v for v in z) / len(z))
    assert 0.7 < rms < 1.4


def test_a_solve_prepared_once_is_the_solve_bit_for_bit() -> None:
    """`prepare` (the inverse diagonal and the weight sums) shared by the uncertainty's
    solves changes no bit. By hand: links {0, 1} and {1, 2}, weights 1 and 2: L's diagonal
    is 1 x (1 - 1/2) = 0.5, 0.5 + 2 x (1 - 2/4) = 1.5, 1; the weight sums 2 and 4."""
    found = [
        clocks.Link((0, 1), [-5.0, 5.0], 3, 1.0, 1),
        clocks.Link((1, 2), [1.0, -1.0], 3, 1.0, 1),
    ]
    weights = [[1.0, 1.0], [2.0, 2.0]]
    ready = clocks.prepare(found, weights, 3)
    assert ready == ([2.0, 1 / 1.5, 1.0], [2.0, 4.0])
    b = clocks.right_side(found, weights, 3)
    assert clocks.solve(found, weights, b, ready) == clocks.solve(found, weights, b)


@given(st.lists(st.floats(-1e18, 1e18), min_size=1, max_size=9))
@settings(max_examples=300, deadline=None)
def test_the_polish_median_is_statistics_median_bit_for_bit(values: list[float]) -> None:
    assert clocks._median(values) == statistics.median(values)


def _row_polish(rows: list[list[int]]) -> list[float]:
    """The median polish row by row, as the contract states it (the oracle of the column by
    column `_polish`)."""
    shifts = [0.0] * len(rows[0])
    for _ in range(50):
        residuals = []
        for row in rows:
            aligned = [value - shift for value, shift in zip(row, shifts, strict=True)]
            centre = statistics.median(aligned)
            residuals.append([a - centre for a in aligned])
        moves = [statistics.median(column) for column in zip(*residuals, strict=True)]
        shifts = [s + m for s, m in zip(shifts, moves, strict=True)]
        if all(abs(m) < 0.5 for m in moves):
            break
    mean = math.fsum(shifts) / len(shifts)
    return [s - mean for s in shifts]


@given(st.integers(1, 5).flatmap(
    lambda width: st.lists(st.lists(st.integers(0, 10**7), min_size=width, max_size=width),
                           min_size=1, max_size=12)))  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_the_polish_and_the_noise_worked_by_column_are_those_of_the_rows_bit_for_bit(
    rows: list[list[int]],
) -> None:
    """Members as columns (2 of them: the mean of a row's two): the same shifts as the row by
    row polish, and the same noise scale as the double differences taken row pair by pair."""
    assert clocks._polish(rows) == _row_polish(rows)
    values = [abs(a - b - c + d) for row, later in itertools.pairwise(rows)
              for j in range(len(row) - 1)
              for a, b, c, d in [(row[j], row[j + 1], later[j], later[j + 1])]]  # fmt: skip
    want = (clocks._HALF_IQR * statistics.median(values), len(values)) if values else (0.0, 0)
    assert clocks.noise(rows) == want


@given(st.lists(st.dictionaries(st.integers(0, 9), st.integers(0, 10**18), min_size=1,
                                max_size=4), max_size=8))  # fmt: skip
@settings(max_examples=200, deadline=None)
def test_the_member_sets_read_from_instances_are_those_of_their_ends(
    ends: list[dict[int, int]],
) -> None:
    """`_instance_sets` (ends read from starts and durations) is `_sets` of `Instance.ends`,
    whatever order the members come in."""
    found = [Instance("0", i, "AllReduce", None, None, {r: e - 7 for r, e in reversed(x.items())},
                      dict.fromkeys(x, 7)) for i, x in enumerate(ends)]  # fmt: skip
    assert clocks._instance_sets(found) == clocks._sets(item.ends() for item in found)


@given(st.integers(0, 2**20), st.integers(0, 40))
@settings(max_examples=200, deadline=None)
def test_the_normals_drawn_at_once_are_gauss_bit_for_bit(seed: int, count: int) -> None:
    """The re-fits' shifts drawn at once are those `gauss` draws one by one (odd counts too),
    times a scale as `gauss(0.0, s)` takes it."""
    drawn = clocks.normals(random.Random(seed), count)
    one = random.Random(seed)
    assert drawn == [one.gauss() for _ in range(count)]
    assert [0.0 + z * 3.7 for z in drawn] == [g.gauss(0.0, 3.7) for g in [random.Random(seed)]
                                               for _ in range(count)]  # fmt: skip
