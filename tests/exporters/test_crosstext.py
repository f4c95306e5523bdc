"""crosstext.py: the matching section names each desync, what differs and who departs."""

from __future__ import annotations

from commscope.exporters.crosstext import matching_lines
from commscope.exporters.extremes import Cut
from commscope.model.schema import Desync, GroupMatch, Matching, Report

DESYNC = Desync(
    process_group="(unnamed)",
    key="index",
    position=0,
    calls={"0": "AllToAll 3072 B Long", "1": "AllToAll 339738624 B Byte"},
    differs=["message size", "dtype"],
    ranks=[0, 1],
)


def lines(*desyncs: Desync) -> list[str]:
    group = GroupMatch(members=[0, 1], ranks_with_traces=[0, 1], desyncs=len(desyncs))
    matching = Matching(desync_count=len(desyncs), desyncs=list(desyncs),
                        groups={"(unnamed)": group})  # fmt: skip
    return list(matching_lines(Report(matching=matching), Cut()))


def test_a_desync_names_what_differs_the_departing_ranks_and_each_call_scaled() -> None:
    found = lines(DESYNC)
    at = found.index("Desyncs (members disagree; first 1 of 1):")
    assert found[at + 1 : at + 3] == [
        "  group (unnamed) index 0 (calls differ in message size, dtype; ranks 0-1 depart):",
        "    rank 0: AllToAll 3.07 KB Long, rank 1: AllToAll 340 MB Byte",
    ]


def test_one_departing_rank_departs_and_a_call_of_unknown_size_is_kept_as_is() -> None:
    one = Desync(process_group="0", key="seq", position=4, differs=["collective"], ranks=[2],
                 calls={"2": "AllGather size unknown"})  # fmt: skip
    found = lines(one)
    at = found.index("Desyncs (members disagree; first 1 of 1):")
    assert found[at + 1 : at + 3] == [
        "  group 0 seq 4 (calls differ in collective; rank 2 departs):",
        "    rank 2: AllGather size unknown",
    ]
