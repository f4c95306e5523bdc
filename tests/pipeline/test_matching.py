"""matching.py: members of an instance agree on type and, where both know them, on size,
dtype and all-to-all split sizes; any disagreement is a desync, named, never a pair."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from commscope.model.schema import CommOp
from commscope.pipeline import matching, p2p
from commscope.pipeline.matching import Matched, describe, match
from hypothesis import given, settings
from hypothesis import strategies as st


def op(kind: str, start: int, size: int | None, dtype: str | None = "Float", *,
       sends: tuple[int, ...] = (), receives: tuple[int, ...] = (), group_size: int = 2,
       seq: int | None = 0) -> CommOp:  # fmt: skip
    return CommOp(kind, start, 10, size, group_size, True, "0", seq, None, dtype, sends, receives)


def one_desync(found: Matched) -> tuple[list[str], list[int], dict[str, str]]:
    assert (found.summary.instances, found.summary.desync_count) == (0, 1)
    (desync,) = found.summary.desyncs
    return desync.differs, desync.ranks, desync.calls


# ------------------------------------------------------------------ dtype and size


def test_calls_of_one_size_but_different_dtypes_are_a_desync_naming_both_ranks() -> None:
    # sampled_2rank's index pairing: 384 Longs (3072 B) against 3072 Bytes; two ranks, no
    # majority: both depart
    found = match({0: [op("AllToAll", 0, 3072, "Long")], 1: [op("AllToAll", 5, 3072, "Byte")]})
    assert one_desync(found) == (
        ["dtype"],
        [0, 1],
        {"0": "AllToAll 3072 B Long", "1": "AllToAll 3072 B Byte"},
    )
    assert (found.instances, found.desynced) == ([], 2)


def test_a_dtype_only_one_member_knows_is_no_disagreement() -> None:
    found = match({0: [op("AllReduce", 0, 4096, "Float")], 1: [op("AllReduce", 5, 4096, None)]})
    assert (found.summary.instances, found.summary.desync_count) == (1, 0)


def test_the_rank_that_departs_from_the_majority_is_named() -> None:
    calls = {r: [op("AllReduce", 0, 4096, "Float", group_size=3)] for r in range(3)}
    calls[2] = [op("AllReduce", 0, 2048, "Half", group_size=3)]
    differs, ranks, _ = one_desync(match(calls))
    assert (differs, ranks) == (["message size", "dtype"], [2])


def test_an_all_to_all_without_split_sizes_must_agree_in_size() -> None:
    # the contract's rule where nothing says the split is uneven
    found = match({0: [op("AllToAll", 0, 419430400, "Byte")],
                   1: [op("AllToAll", 5, 339738624, "Byte")]})  # fmt: skip
    assert one_desync(found)[:2] == (["message size"], [0, 1])


# ------------------------------------------------------------------ all-to-all-v split sizes

# Group ranks 0 and 1 (pg_config). Rank 0 sends 2 to itself and 6 to rank 1, receives 2 and
# 4: S = max(8, 6) x 4 B = 32 B. Rank 1 sends 4 and 1, receives 6 and 1: S = 28 B. Every
# send is the matching receive: 0->1 is 6 both sides, 1->0 is 4, each to itself as recorded.
RANK_0 = op("AllToAll", 0, 32, sends=(2, 6), receives=(2, 4))
RANK_1 = op("AllToAll", 5, 28, sends=(4, 1), receives=(6, 1))
MEMBERS = {"0": [0, 1]}


def test_an_all_to_all_v_of_different_sizes_whose_splits_agree_is_one_instance() -> None:
    found = match({0: [RANK_0], 1: [RANK_1]}, MEMBERS)
    assert (found.summary.instances, found.summary.desync_count) == (1, 0)
    assert found.instances[0].starts == {0: 0, 1: 5}


def test_a_send_that_is_not_the_peers_receive_is_a_desync() -> None:
    # rank 1 records receiving 5 from rank 0, which records sending it 6
    wrong = op("AllToAll", 5, 28, sends=(4, 1), receives=(5, 1))
    differs, ranks, calls = one_desync(match({0: [RANK_0], 1: [wrong]}, MEMBERS))
    assert (differs, ranks) == (["split sizes"], [0, 1])
    assert calls["1"] == "AllToAll 28 B Float splits in [4, 1] out [5, 1]"


def test_split_sizes_are_compared_only_where_both_are_recorded() -> None:
    # group of 3, each list cut after 2 entries (as Kineto cuts past 30): rank 2's sends
    # (to ranks 0 and 1) meet receives nobody recorded, so they cannot disagree; the rest
    # agree (0->1: 2, 1->0: 3, each to itself)
    calls = {
        0: [op("AllToAll", 0, 40, sends=(1, 2), receives=(1, 3), group_size=3)],
        1: [op("AllToAll", 0, 44, sends=(3, 4), receives=(2, 4), group_size=3)],
        2: [op("AllToAll", 0, 99, sends=(99, 98), receives=(7, 8), group_size=3)],
    }
    found = match(calls, {"0": [0, 1, 2]})
    assert (found.summary.instances, found.summary.desync_count) == (1, 0)


def test_split_sizes_go_unchecked_when_the_groups_ranks_cannot_be_placed() -> None:
    # a group of 8 of which 2 are traced and no pg_config: which group rank each is is unknown
    calls = {
        0: [op("AllToAll", 0, 32, sends=(2, 6), receives=(2, 4), group_size=8)],
        1: [op("AllToAll", 5, 28, sends=(4, 1), receives=(5, 1), group_size=8)],
    }
    assert match(calls).summary.instances == 1
    assert match(calls, {"0": [0, 1, 2, 3, 4, 5, 6, 7]}).summary.desync_count == 1


def test_every_member_traced_places_the_group_without_pg_config() -> None:
    wrong = op("AllToAll", 5, 28, sends=(4, 1), receives=(5, 1))
    assert match({0: [RANK_0], 1: [wrong]}).summary.desync_count == 1


def test_an_uneven_call_must_match_a_peer_that_recorded_no_splits() -> None:
    even = op("AllToAll", 5, 28)
    assert match({0: [RANK_0], 1: [even]}, MEMBERS).summary.desync_count == 1
    same = op("AllToAll", 5, 32)
    assert match({0: [RANK_0], 1: [same]}, MEMBERS).summary.instances == 1


def test_a_long_split_list_is_described_by_its_first_entries() -> None:
    call = op("AllToAll", 0, 80, sends=tuple(range(10)), receives=(1,))
    assert describe(call) == "AllToAll 80 B Float splits in [0, 1, 2, 3, 4, 5, 6, 7, ...] out [1]"


# ------------------------------------------------------------------ oracle

KINDS = ("AllReduce", "AllToAll", "AllGather", "SendRecv")


@st.composite
def jobs(draw: st.DrawFn) -> tuple[dict[int, list[CommOp]], dict[str, list[int]] | None]:
    """2-4 ranks of up to 6 calls each on random groups, types, sizes, dtypes and splits;
    Seq on every call or on none; group "0"'s members known (pg_config) or not."""
    world = draw(st.integers(2, 4))
    with_seq = draw(st.booleans())
    calls: dict[int, list[CommOp]] = {}
    for rank in range(world):
        own = []
        for index in range(draw(st.integers(0, 6))):
            kind = draw(st.sampled_from(KINDS))
            splits = st.lists(st.integers(0, 2), max_size=world).map(tuple)
            uneven = kind == "AllToAll" and draw(st.booleans())
            own.append(CommOp(
                kind, 100 * index, 10, draw(st.sampled_from([None, 64, 128])), world, True,
                draw(st.sampled_from(["0", None])),
                draw(st.integers(0, 3)) if with_seq else None, None,
                draw(st.sampled_from([None, "Float", "Long"])),
                draw(splits) if uneven else (), draw(splits) if uneven else (),
            ))  # fmt: skip
        calls[rank] = own
    members = {"0": list(range(world))} if draw(st.booleans()) else None
    return calls, members


def agree(a: CommOp, b: CommOp, places: Mapping[int, int] | None, ranks: Sequence[int]) -> bool:
    """Brute force, one pair of members (ranks[0] made a, ranks[1] made b): the contract."""
    if a.collective != b.collective:
        return False
    if None not in (a.dtype, b.dtype) and a.dtype != b.dtype:
        return False
    both_uneven = all(c.collective == "AllToAll" and (c.in_splits or c.out_splits) for c in (a, b))
    sizes = {a.message_bytes, b.message_bytes}
    if None not in sizes and len(sizes) > 1 and not both_uneven:
        return False
    if places is None or a.collective != "AllToAll":
        return True
    i, j = places[ranks[0]], places[ranks[1]]
    sent = a.in_splits[j] if j < len(a.in_splits) else None
    received = b.out_splits[i] if i < len(b.out_splits) else None
    return None in (sent, received) or sent == received


def placed(group: str, calls: Mapping[int, list[CommOp]], known: bool) -> dict[int, int] | None:
    """Group ranks: pg_config's order, or every rank's when each has calls in the group
    (SendRecv calls are pairwise: not matched, so they make no rank a member)."""
    having = sorted(
        r
        for r, ops in calls.items()
        if any(group_of(o) == group and o.collective != "SendRecv" for o in ops)
    )
    if known or having == sorted(calls):
        return {rank: place for place, rank in enumerate(sorted(calls))}
    return None


def group_of(call: CommOp) -> str:
    return call.process_group or "(unnamed)"


@settings(deadline=None, max_examples=300, database=None)
@given(jobs())
def test_no_instance_pairs_unlike_calls_and_every_call_is_accounted_once(
    job: tuple[dict[int, list[CommOp]], dict[str, list[int]] | None],
) -> None:
    calls, members = job
    found = match(calls, members)
    by_start = {(r, c.start_ns): c for r, ops in calls.items() for c in ops}
    seen: set[tuple[int, int]] = set()
    for instance in found.instances:
        made = {rank: by_start[(rank, start)] for rank, start in instance.starts.items()}
        places = placed(instance.group, calls, members is not None and instance.group == "0")
        for (ra, a), (rb, b) in itertools.product(made.items(), repeat=2):
            assert agree(a, b, places, (ra, rb)), (instance, a, b)
        assert seen.isdisjoint((r, s) for r, s in instance.starts.items())
        seen.update(instance.starts.items())
    groups: dict[str, set[int]] = {}
    for rank, ops in calls.items():
        for c in ops:
            if c.collective != "SendRecv":
                groups.setdefault(group_of(c), set()).add(rank)
    lone = sum(1 for ops in calls.values() for c in ops if c.collective != "SendRecv"
               and group_of(c) == "(unnamed)" and len(groups[group_of(c)]) < 2)  # fmt: skip
    lone += sum(1 for ops in calls.values() for c in ops if c.collective != "SendRecv"
                and group_of(c) == "0" and members is None and len(groups["0"]) < 2)  # fmt: skip
    summary = found.summary
    total = sum(len(ops) for ops in calls.values()) - summary.point_to_point
    assert len(seen) + found.desynced + summary.unmatched + lone == total


def test_an_instance_lists_its_members_in_rank_order_whatever_order_the_ranks_come_in() -> None:
    """Each member's start (plus its base), duration and call, in rank order; the largest
    known size and group size."""
    calls = {2: [op("AllReduce", 30, 128)], 0: [op("AllReduce", 10, None, group_size=3)],
             1: [op("AllReduce", 20, 128)]}  # fmt: skip
    (found,) = match(calls, base_ns={1: 1000}).instances
    assert (list(found.starts.items()), list(found.calls)) == (
        [(0, 10), (1, 1020), (2, 30)],
        [0, 1, 2],
    )
    assert (found.message_bytes, found.group_size, found.durations) == (
        128,
        3,
        {0: 10, 1: 10, 2: 10},
    )


def test_a_p2p_pair_is_an_instance_by_the_same_rule_of_two_members() -> None:
    """Sender then receiver, group size 2 whatever the calls' group says."""
    send = CommOp("SendRecv", 100, 10, 64, 8, True, "0", 0, None, "Float", send_to=1)
    receive = CommOp("SendRecv", 90, 30, 64, 8, True, "0", 0, None, "Float", recv_from=0)
    (pair,) = p2p.pair({1: [receive], 0: [send]}, {0: 5}).pairs
    found = pair.instance
    assert (list(found.starts.items()), found.durations) == ([(0, 105), (1, 90)], {0: 10, 1: 30})
    assert (found.collective, found.message_bytes, found.group_size) == ("SendRecv", 64, 2)


# ------------------------------------------------------------------ the positions' layout


def _plain_positions(
    ranks: Mapping[int, list[CommOp]], by_seq: bool
) -> list[tuple[int, dict[int, CommOp]]]:
    """Every call keyed by (Seq or index, its repeat on its rank), rank by rank: the oracle of
    `_positions`, which keys by the Seq alone while no rank repeats one."""
    positions: dict[tuple[int, int], dict[int, CommOp]] = {}
    for rank in sorted(ranks):
        seen: dict[int, int] = {}
        for index, call in enumerate(ranks[rank]):
            key = (call.seq or 0) if by_seq else index
            seen[key] = seen.get(key, -1) + 1
            positions.setdefault((key, seen[key]), {})[rank] = call
    return [(key[0], positions[key]) for key in sorted(positions)]


_calls = st.builds(
    op,
    st.sampled_from(["AllReduce", "AllGather", "AllToAll"]),
    st.integers(0, 10**6),
    st.sampled_from([None, 8, 16]),
    st.sampled_from([None, "Float"]),
    sends=st.sampled_from([(), (1, 1)]),
    group_size=st.sampled_from([2, 3]),
    seq=st.integers(0, 5),
)


@given(st.dictionaries(st.integers(0, 3), st.lists(_calls, max_size=6), max_size=4),
       st.booleans())  # fmt: skip
@settings(max_examples=300, deadline=None)
def test_positions_and_alike_instances_are_those_of_the_plain_rules(
    ranks: dict[int, list[CommOp]], by_seq: bool
) -> None:
    """`_positions` is the plain keying by (Seq or index, repeat), Seqs repeated or not; a
    position's instance built in the pass that checks its calls alike is `instance`'s, and
    there is none exactly when they are not alike."""
    found = matching._positions(ranks, by_seq)
    assert found == _plain_positions(ranks, by_seq)
    base = {rank: 1000 * rank for rank in ranks}
    for position, calls in found:
        fast = matching._alike_instance("0", position, calls, base)
        if matching._alike(calls.values()):
            assert fast == matching.instance("0", position, calls, base)
        else:
            assert fast is None
