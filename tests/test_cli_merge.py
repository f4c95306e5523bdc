"""`commscope merge` as a user runs it: a real process on the JSON reports of two shards."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from builders import job_trace, rank_trace, write


def commscope(*args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "commscope.service.cli", *map(str, args)]
    return subprocess.run(
        command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False
    )


def shard_report(tmp_path: Path, name: str, traces: dict[str, bytes]) -> Path:
    """`commscope report` on a folder `name/w` holding `traces`: its JSON report."""
    for file_name, document in traces.items():
        write(tmp_path / name / "w" / file_name, document)
    out = tmp_path / name / "out"
    result = commscope("report", tmp_path / name / "w", "--out", out, "--jobs", "1", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (found,) = out.glob("*.json")
    return found


@pytest.fixture
def shards(tmp_path: Path) -> tuple[Path, Path]:
    """Rank 0 and rank 1 of one two-rank job, each reported alone."""
    a = shard_report(tmp_path, "a", {"rank0_trace.json": rank_trace(0, 2)})
    b = shard_report(tmp_path, "b", {"rank1_trace.json": rank_trace(1, 2)})
    return a, b


def test_two_shards_merge_to_text_and_json(shards: tuple[Path, Path], tmp_path: Path) -> None:
    a, b = shards
    result = commscope("merge", a, b, "-o", tmp_path / "merged.json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "Merged from 2 shard reports" in result.stdout
    assert "16. MERGED FROM SHARDS" in result.stdout
    # step times 1.0 and 1.5 ms (tests/builders.py): the mean over both shards' ranks
    assert "Time per Iteration: 1.25 ms" in result.stdout
    document = json.loads((tmp_path / "merged.json").read_text())
    # the text and HTML reports beside the JSON, as `report` writes them
    assert (tmp_path / "merged.txt").read_text() == result.stdout
    assert "16. MERGED FROM SHARDS" in (tmp_path / "merged.html").read_text()
    assert result.stderr.splitlines()[-3:] == [
        f"commscope: wrote {tmp_path / name}"
        for name in ("merged.txt", "merged.json", "merged.html")
    ]
    assert document["ranks"] == [0, 1]
    assert [shard["ranks"] for shard in document["merge"]["shards"]] == [[0], [1]]
    printed = commscope("merge", b, a, "--json", cwd=tmp_path)
    assert printed.returncode == 0, printed.stderr
    shown = json.loads(printed.stdout)
    # the order of the arguments is no matter; only the provenance says how each was made
    assert shown.pop("provenance")["inputs"] == [str(b.resolve()), str(a.resolve())]
    assert document.pop("provenance")["command"][-2:] == ["-o", str(tmp_path / "merged.json")]
    assert shown == document


def test_reports_of_different_jobs_are_refused_with_one_line(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    other = shard_report(tmp_path, "c", {"rank2_trace.json": job_trace(2, 4)})
    result = commscope("merge", shards[0], other, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1
    assert "are different jobs (world size 2 against 4)" in result.stderr


def test_a_file_that_is_not_a_report_is_refused_with_one_line(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    trace = write(tmp_path / "rank1_trace.json", rank_trace(1, 2))
    result = commscope("merge", shards[0], trace, cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr == (
        f"commscope merge: error: {trace}: not a commscope JSON report (a profiler trace: run "
        "`commscope report` on its folder first)\n"
    )


def test_one_rank_reported_differently_by_two_shards_is_refused(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    # rank 1 again, but with rank 0's trace under rank 1's name: other step times
    document = rank_trace(0, 2).replace(b'"rank": 0', b'"rank": 1')
    again = shard_report(tmp_path, "c", {"rank1_trace.json": document})
    result = commscope("merge", shards[1], again, cwd=tmp_path)
    assert result.returncode == 2
    assert "rank 1 of window w is in" in result.stderr
    assert "with different numbers" in result.stderr


def test_a_shard_given_twice_is_refused_with_exit_2(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    """The same file twice, or a copy of it under another name (the same report: only the
    provenance of a report written again would differ): one line, exit 2, nothing written."""
    a, b = shards
    copy = tmp_path / "copy.json"
    document = json.loads(b.read_text())
    document["provenance"]["generated_utc"] = "2030-01-01T00:00:00Z"
    copy.write_text(json.dumps(document))
    for given, again in ((b, b), (b, copy)):
        result = commscope("merge", a, given, again, "-o", tmp_path / "m.json", cwd=tmp_path)
        assert result.returncode == 2
        assert result.stderr == (
            f"commscope merge: error: {again}: the same shard as {given} (given twice)\n"
        )
        assert not (tmp_path / "m.json").exists()


def test_merge_o_names_the_json_report(shards: tuple[Path, Path], tmp_path: Path) -> None:
    result = commscope("merge", *shards, "-o", tmp_path / "merged.txt", cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "name the JSON report (.json)" in result.stderr
