"""`commscope report` on Flight Recorder dumps: the stuck rank and collective named in text,
JSON and HTML; a hostile pickle refused, named and counted, the rest reported."""

from __future__ import annotations

import pickle
from pathlib import Path

from builders import rank_trace, write
from flight_builder import dump, entry
from flight_builder import write as write_dump
from test_cli import reports, run


class _Shell:
    def __reduce__(self) -> tuple[object, tuple[str]]:
        return print, ("never printed",)


def test_dumps_alone_name_the_stuck_rank_and_a_hostile_pickle_is_refused(tmp_path: Path) -> None:
    """Rank 0 (pickle) enqueued AllReduce #1-#3, rank 1 (JSON) stopped after #2, rank 2's
    file is a pickle whose __reduce__ calls a function: refused (exit 3), the rest reported."""
    folder = tmp_path / "dumps"
    ops = [entry(1), entry(2), entry(3, state="scheduled")]
    write_dump(folder, 0, dump(ops, ranks="[0, 1]"))
    write_dump(folder, 1, dump(ops[:2], ranks="[0, 1]"), json_form=True)
    (folder / "nccl_trace_rank_2").write_bytes(pickle.dumps({"entries": [_Shell()]}))
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 3, result.stderr
    text, doc = reports(tmp_path / "out")
    (skipped,) = doc["inputs"]["skipped"]
    assert skipped["path"] == str(folder / "nccl_trace_rank_2")
    assert skipped["reason"].startswith("refused: a pickle that builds objects (builtins.print)")
    found = doc["flight_recorder"]
    assert (found["dumps"], found["ranks"]) == (2, [0, 1])
    sentence = (
        "rank 1 stopped after AllReduce #2 of group 0 (default_pg): "
        "rank 0 entered AllReduce #3 without it"
    )
    assert f"Stuck: {sentence}" in text
    assert f"commscope: Flight Recorder: {sentence}\n" in result.stdout
    assert "commscope: 0 of 1 files (and 2 Flight Recorder dumps), 0 windows" in result.stdout
    (html,) = (tmp_path / "out").glob("*.html")
    assert "Stuck: rank 1 stopped after AllReduce #2 of group 0 (default_pg)" in html.read_text()


def test_dumps_beside_a_trace_are_reported_apart(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    write(folder / "rank0_trace.json", rank_trace(0, 1))
    write_dump(folder, 0, dump([entry(1)], ranks="[0]"))
    result = run(folder, "--out", tmp_path / "out", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    text, doc = reports(tmp_path / "out")
    assert doc["ranks"] == [0] and doc["inputs"]["files"] == 1
    assert doc["flight_recorder"]["stuck"] == [] and "Stuck: none" in text
    assert (
        "1 Flight Recorder dump(s): reported apart (section Flight Recorder)"
        in doc["inputs"]["notes"]
    )
