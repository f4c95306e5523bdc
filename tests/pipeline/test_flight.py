"""The Flight Recorder section from hand-made dumps: progress, stuck ranks (and a brute-force
oracle for them), mismatches with the first one's stack, durations."""

from __future__ import annotations

import pickle

from commscope.collector.flight import decode
from commscope.model.flight import FlightDump, FlightEntry
from commscope.pipeline.flight import analyse
from flight_builder import dump, entry, status
from hypothesis import given
from hypothesis import strategies as st


def _dumps(*per_rank: dict[str, object]) -> list[FlightDump]:
    return [decode(pickle.dumps(d), rank, f"nccl_trace_rank_{rank}") for rank, d in
            enumerate(per_rank)]  # fmt: skip


def test_the_rank_that_stopped_is_named_with_the_collective() -> None:
    """Ranks 0 and 2 enqueued AllReduce #1, AllGather #2, AllReduce #3; rank 1 stopped after
    #2: it is stuck after AllGather #2, and ranks 0, 2 entered AllReduce #3 without it."""
    ops = [entry(1), entry(2, "nccl:_allgather_base"), entry(3, state="scheduled")]
    found = analyse(_dumps(dump(ops, ranks="[0, 1, 2]"), dump(ops[:2]), dump(ops)))
    (stuck,) = found.stuck
    assert (stuck.group, stuck.desc, stuck.rank) == ("0", "default_pg", 1)
    assert (stuck.after_seq, stuck.after_op) == (2, "AllGather")
    assert (stuck.missed_seq, stuck.missed_op, stuck.entered_by) == (3, "AllReduce", [0, 2])


def test_progress_from_the_buffer_without_pg_status() -> None:
    ops = [entry(1), entry(2, state="started"), entry(3, state="scheduled")]
    (progress,) = analyse(_dumps(dump(ops, ranks="[0]"))).progress
    assert (progress.enqueued, progress.started, progress.completed) == (3, 2, 1)
    assert progress.last_op == "AllReduce"


def test_pg_status_wins_over_the_buffer() -> None:
    """The ring buffer may have dropped the newest's predecessors; pg_status counts them all."""
    (progress,) = analyse(_dumps(dump([entry(7)], status(9, 8, 7), ranks="[0]"))).progress
    assert (progress.enqueued, progress.started, progress.completed) == (9, 8, 7)
    assert progress.last_op is None  # #9 is not in its buffer


def test_a_member_without_a_dump_is_said() -> None:
    found = analyse(_dumps(dump([entry(1)], ranks="[0, 1, 5]"), dump([entry(1)])))
    assert found.undumped == {"0": [5]} and found.stuck == []


def test_mismatches_type_size_dtype_and_the_first_stack() -> None:
    """#1: rank 1 all_gather where rank 0 all_reduce (type); #2: rank 1 2048 elements (size);
    #3: rank 1 BFloat16 (dtype); the first's stack is rank 1's frame of #1."""
    zero = [entry(1), entry(2), entry(3)]
    one = [entry(1, "nccl:all_gather"), entry(2, input_sizes=[[2048]]),
           entry(3, input_dtypes=["BFloat16"])]  # fmt: skip
    found = analyse(_dumps(dump(zero), dump(one)))
    kinds = [
        (m.seq, m.kind, m.rank, m.found, m.reference_rank, m.expected) for m in found.mismatches
    ]
    assert kinds == [
        (1, "type", 1, "nccl:all_gather", 0, "nccl:all_reduce"),
        (2, "size", 1, "[[2048]]", 0, "[[1024]]"),
        (3, "dtype", 1, "['BFloat16']", 0, "['Float']"),
    ]
    assert found.mismatch_count == 3
    assert found.mismatches[0].stack == ["train_step (train.py:11)"]


def test_all_to_all_sizes_may_differ() -> None:
    a2a = "nccl:all_to_all"
    found = analyse(_dumps(dump([entry(1, a2a)]), dump([entry(1, a2a, input_sizes=[[7]])])))
    assert found.mismatches == []


def test_p2p_entries_are_left_out() -> None:
    send = entry(5, "nccl:send", is_p2p=True, collective_seq_id=0, p2p_seq_id=1)
    found = analyse(_dumps(dump([entry(1), send]), dump([entry(1)])))
    assert found.stuck == [] and found.mismatches == []
    assert [p.enqueued for p in found.progress] == [1, 1]


def test_durations_where_timing_was_enabled() -> None:
    """Two timed AllReduces (1.5 ms, 2.5 ms) and one untimed: count 2, total 4, max 2.5."""
    timed = [entry(1, duration_ms=1.5), entry(2, duration_ms=2.5), entry(3)]
    (d,) = analyse(_dumps(dump(timed))).durations
    assert (d.group, d.collective, d.count, d.total_ms, d.max_ms) == ("0", "AllReduce", 2, 4.0, 2.5)
    assert analyse(_dumps(dump([entry(1)]))).durations == []


def _brute_stuck(seqs: dict[int, list[int]]) -> set[int]:
    """A rank is stuck when some other rank holds a collective it lacks and that comes after
    everything it enqueued."""
    return {
        r for r, mine in seqs.items()
        for other in seqs.values() for s in other
        if s not in mine and s > max(mine, default=0)
    }  # fmt: skip


@given(st.lists(st.integers(0, 6), min_size=1, max_size=6))
def test_stuck_ranks_against_brute_force(enqueued: list[int]) -> None:
    """Each rank r enqueued collectives 1..k_r (whole buffers, no pg_status; pg_config
    lists every rank, as PyTorch writes it)."""
    seqs = {r: list(range(1, k + 1)) for r, k in enumerate(enqueued)}
    members = {"0": list(seqs)}
    dumps = [FlightDump(rank=r, path=str(r), members=members, entries=[FlightEntry(
             record_id=s, group="0", collective_seq_id=s) for s in mine])
             for r, mine in seqs.items()]  # fmt: skip
    found = analyse(dumps)
    assert {s.rank for s in found.stuck} == _brute_stuck(seqs)
    for s in found.stuck:
        assert s.after_seq == (enqueued[s.rank] or None)
        assert s.entered_by == sorted(r for r, k in enumerate(enqueued) if k > enqueued[s.rank])
