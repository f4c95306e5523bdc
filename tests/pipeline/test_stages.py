"""Pipeline parallelism from P2P pairs: hand-worked on a 2-stage step, and a brute-force
oracle (every nanosecond tested) for the bubble and waiting split (`pipeline.stages`)."""

from __future__ import annotations

from array import array

from commscope.model.schema import CommOp, InSteps, RankResult
from commscope.pipeline import crossrank, p2p, stages
from commscope.pipeline.intervals import IntervalSet, difference, pack, packed
from hypothesis import given, settings
from hypothesis import strategies as st

S = "SendRecv"


def _op(start: int, end: int, send_to: int | None = None, recv_from: int | None = None) -> CommOp:
    return CommOp(S, start, end - start, 1024, 2, False, send_to=send_to, recv_from=recv_from)


def _result(
    calls: list[CommOp], compute: list[tuple[int, int]], step: tuple[int, int]
) -> RankResult:
    comm = IntervalSet((op.start_ns, op.start_ns + op.dur_ns) for op in calls)
    exposed = difference(comm, IntervalSet(compute))
    inside = IntervalSet(compute).measure()  # compute lies within the step here
    return RankResult(
        evidence_text="cpu (gloo)",
        calls=calls,
        exposed_runs=packed(exposed),
        step_runs=pack(array("q", [step[0]]), array("q", [step[1]])),
        in_steps=InSteps(span_ns=step[1] - step[0], compute_ns=inside),
        steps={1: step[1] - step[0]},
    )


def two_stages() -> dict[int, RankResult]:
    """Stage 0 computes [0,10] and [60,70], sends activations [10,30] and receives gradients
    [70,100]; stage 1 receives [0,30], computes [30,60] and sends gradients [60,90]."""
    return {
        0: _result(
            [_op(10, 30, send_to=1), _op(70, 100, recv_from=1)], [(0, 10), (60, 70)], (0, 100)
        ),
        1: _result([_op(0, 30, recv_from=0), _op(60, 90, send_to=0)], [(30, 60)], (0, 100)),
    }


def test_pairs_follow_sender_receiver_and_order() -> None:
    paired = p2p.pair({rank: r.calls for rank, r in two_stages().items()})
    assert [(p.sender, p.receiver, p.instance.starts) for p in paired.pairs] == [
        (0, 1, {0: 10, 1: 0}),
        (1, 0, {1: 60, 0: 70}),
    ]
    assert (paired.unpaired, paired.desyncs) == (0, 0)


def test_a_send_without_its_receive_is_unpaired_and_a_size_clash_a_desync() -> None:
    calls = {0: [_op(0, 5, send_to=1), _op(10, 15, send_to=1)],
             1: [CommOp(S, 0, 5, 2048, 2, False, recv_from=0)]}  # fmt: skip
    paired = p2p.pair(calls)
    assert (len(paired.pairs), paired.unpaired, paired.desyncs) == (0, 1, 1)


def test_hand_worked_two_stage_step() -> None:
    """Pair 0→1: a = 10, so stage 1 waits [0,10] for activations; pair 1→0: a = 70, so
    stage 1 waits [60,70] to send. Stage 0: bubble = 100 - 20 compute - 50 transfer = 30
    (its idle [30,60]); stage 1: 100 - 30 - 40 = 30 = 10 + 10 waiting + 10 idle [90,100].
    m = 1 microbatch, p = 2: schedule = min(bubble, 1 x compute)."""
    cross = crossrank.window(two_stages(), {0: crossrank.RankInfo(), 1: crossrank.RankInfo()})
    assert (cross.matching.p2p_pairs, cross.matching.point_to_point) == (2, 4)
    found = stages.section(cross.pipeline)
    assert (found.stages, found.stage_source, found.microbatches) == (2, stages.CHAIN, 1.0)
    first, second = found.per_rank["0"], found.per_rank["1"]
    assert (first.stage, first.compute_s, first.transfer_s, first.bubble_s) == (
        0,
        20e-9,
        50e-9,
        30e-9,
    )
    assert (first.schedule_bubble_s, first.neighbour_bubble_s) == (20e-9, 10e-9)
    assert (first.waiting_activations_s, first.waiting_gradients_s, first.waiting_to_send_s) == (
        0,
        0,
        0,
    )
    assert (second.stage, second.compute_s, second.transfer_s, second.bubble_s) == (
        1,
        30e-9,
        40e-9,
        30e-9,
    )
    assert (second.schedule_bubble_s, second.neighbour_bubble_s) == (30e-9, 0.0)
    assert (second.waiting_activations_s, second.waiting_to_send_s) == (10e-9, 10e-9)
    assert (first.caused_waiting_s, first.root_caused_waiting_s) == (20e-9, 20e-9)
    # rank 0 came last at both pairs: a coin does that with chance 1/4 (count and wait tests
    # alike), doubled for the two tests and for the two ranks: p = 1, so no stage is named
    assert (found.waited_for_rank, found.waited_for_stage) == (None, None)
    assert found.evidence == (
        "no stage stands out: rank 0 (stage 0) arrived last at 2 of its 2 matched P2P pairs "
        "(1.0 expected by chance) and caused at the root 20.0 ns of all 20.0 ns exposed P2P "
        "waiting (100%); p = 1 that chance does this to one of 2 ranks"
    )
    assert cross.split[1].waiting_ns == 20  # the contract's split counts the pairs too


def slow_middle(microbatches: int) -> dict[int, RankResult]:
    """Ranks 0→1→2, forward only, every 100 ns a microbatch i (offsets from 100i): rank 0
    computes [35,60] and posts its send at 0, which rank 1 receives at [30,35] (rank 0
    waits [0,30] to send); rank 1 computes [35,80] and sends [80,85] to rank 2, whose
    receive is posted at 0 (waits [0,80]) and which computes [85,95]."""
    results: dict[int, list] = {0: [[], []], 1: [[], []], 2: [[], []]}  # calls, compute
    for i in range(microbatches):
        at = 100 * i
        results[0][0].append(_op(at, at + 35, send_to=1))
        results[0][1].append((at + 35, at + 60))
        results[1][0] += [_op(at + 30, at + 35, recv_from=0), _op(at + 80, at + 85, send_to=2)]
        results[1][1].append((at + 35, at + 80))
        results[2][0].append(_op(at, at + 85, recv_from=1))
        results[2][1].append((at + 85, at + 95))
    step = (0, 100 * microbatches)
    return {rank: _result(calls, compute, step) for rank, (calls, compute) in results.items()}


def test_the_slow_stage_is_named_when_chance_cannot_explain_it() -> None:
    """Rank 1 came last at all 12 pairs of 6 microbatches: chance 2^-12 for either test, so
    p = 2 x 2^-12 x 3 ranks = 0.0015 ≤ 0.05; it caused all 6 x (30 + 80) = 660 ns."""
    infos = {r: crossrank.RankInfo() for r in range(3)}
    found = stages.section(crossrank.window(slow_middle(6), infos).pipeline)
    assert (found.waited_for_rank, found.waited_for_stage) == (1, 1)
    assert found.evidence == (
        "rank 1 (stage 1) arrived last at 12 of its 12 matched P2P pairs (6.0 expected by "
        "chance) and caused at the root 660 ns of all 660 ns exposed P2P waiting (100%); "
        "p = 0.0015 that chance does this to one of 3 ranks"
    )


def test_two_microbatches_are_too_few_to_name_a_stage() -> None:
    """The same pattern twice: last at 4 of 4, chance 2^-4 each, p = 2 x 2^-4 x 3 = 0.375."""
    infos = {r: crossrank.RankInfo() for r in range(3)}
    found = stages.section(crossrank.window(slow_middle(2), infos).pipeline)
    assert found.waited_for_rank is None
    assert found.evidence is not None and found.evidence.startswith("no stage stands out")
    assert found.evidence.endswith("p = 0.38 that chance does this to one of 3 ranks")


def test_the_config_degree_places_stages_on_torchtitans_mesh() -> None:
    cross = crossrank.window(two_stages(), {0: crossrank.RankInfo(), 1: crossrank.RankInfo()})
    found = stages.section(cross.pipeline, pp=2, world=2)
    assert found.stage_source is not None and found.stage_source.startswith("config")
    assert stages.mesh_stages(range(8), 4, 8) == {0: 0, 1: 0, 2: 1, 3: 1, 4: 2, 5: 2, 6: 3, 7: 3}


def test_chains_and_cycles() -> None:
    assert stages.chain_stages({(0, 1): 2, (1, 2): 2, (2, 1): 1}) == ({0: 0, 1: 1, 2: 2}, None)
    assert stages.chain_stages({(4, 5): 1, (6, 7): 1}) == ({4: 0, 5: 1, 6: 0, 7: 1}, None)
    found, why = stages.chain_stages({(0, 1): 1, (1, 0): 0, (1, 2): 1, (2, 0): 1})
    assert found == {} and why is not None and "cycle" in why


# ---------------------------------------------------------------- brute-force oracle

GRID = 40
spans = st.tuples(st.integers(0, GRID - 1), st.integers(1, 12)).map(
    lambda t: (t[0], min(GRID, t[0] + t[1]))
)


def _covers(intervals: list[tuple[int, int]], t: int) -> bool:
    return any(a <= t < b for a, b in intervals)


def _oracle(
    results: dict[int, RankResult], pairs: list[p2p.Pair], forward: set[tuple[int, int]]
) -> dict[int, tuple[int, ...]]:
    """Per rank, nanosecond by nanosecond: (bubble, acts, grads, send) as defined."""
    pieces: dict[int, dict[str, list[tuple[int, int]]]] = {
        r: {"t": [], "a": [], "g": [], "s": []} for r in results
    }
    for item in pairs:
        last = max(item.instance.starts.values())
        for member, start in item.instance.starts.items():
            end = start + item.instance.durations[member]
            cut = min(max(last, start), end)
            pieces[member]["t"].append((cut, end))
            kind = (
                "s"
                if member == item.sender
                else ("a" if (item.sender, item.receiver) in forward else "g")
            )
            pieces[member][kind].append((start, cut))
    found = {}
    for rank, result in results.items():
        comm = [(op.start_ns, op.start_ns + op.dur_ns) for op in result.calls]
        compute = COMPUTE[rank]
        got = [0, 0, 0, 0]
        for t in range(STEP[0], STEP[1]):
            if _covers(compute, t) or _covers(pieces[rank]["t"], t):
                continue
            got[0] += 1
            if not _covers(comm, t):
                continue
            flags = [_covers(pieces[rank][k], t) for k in "ags"]
            if any(flags):
                got[1 + flags.index(True)] += 1
        found[rank] = tuple(got)
    return found


COMPUTE: dict[int, list[tuple[int, int]]] = {}
STEP = (0, GRID)


@settings(max_examples=60, deadline=None)
@given(
    sends=st.lists(
        st.tuples(st.sampled_from([(0, 1), (1, 0), (1, 2), (2, 1)]), spans, spans), max_size=5
    ),
    compute=st.lists(st.lists(spans, max_size=3), min_size=3, max_size=3),
)
def test_bubble_and_waits_agree_with_a_nanosecond_oracle(sends: list, compute: list) -> None:
    calls: dict[int, list[CommOp]] = {0: [], 1: [], 2: []}
    for (a, b), out, back in sends:
        calls[a].append(_op(*out, send_to=b))
        calls[b].append(_op(*back, recv_from=a))
    COMPUTE.clear()
    COMPUTE.update({r: [tuple(c) for c in compute[r]] for r in range(3)})
    results = {}
    for rank in range(3):
        merged = IntervalSet(COMPUTE[rank])
        result = _result(calls[rank], list(merged.runs()), STEP)
        results[rank] = result
    cross = crossrank.window(results, {r: crossrank.RankInfo() for r in range(3)})
    paired = p2p.pair(calls)
    forward = stages.first_directions(paired.pairs, {})
    expected = _oracle(results, paired.pairs, forward)
    for rank, t in cross.pipeline.ranks.items():
        assert (t.bubble_ns, t.wait_act_ns, t.wait_grad_ns, t.wait_send_ns) == expected[rank]


def test_the_schedule_decides_whether_the_bubble_formula_applies() -> None:
    assert stages.schedule_of(None, None) is None  # GPipe or 1F1B assumed
    assert stages.schedule_of(None, 4) == "1F1B"  # TorchTitan's default
    assert stages.schedule_of("Interleaved1F1B", 4) == "Interleaved1F1B"
    cross = crossrank.window(two_stages(), {0: crossrank.RankInfo(), 1: crossrank.RankInfo()})
    assert stages.section(cross.pipeline).schedule == "GPipe or 1F1B assumed (no config names one)"
    found = stages.section(cross.pipeline, schedule="DualPipeV")
    assert (found.schedule, found.bubble_formula) == ("DualPipeV (config)", "unknown for DualPipeV")
    assert found.per_rank["0"].schedule_bubble_s is None
    assert found.per_rank["0"].bubble_s == 30e-9
