"""Finding windows and rank files on disk, and opening plain or gzip traces."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest
from commscope.collector.discover import find_windows, open_trace, rank_from_name
from commscope.model.errors import ConfigError


@pytest.mark.parametrize(
    ("name", "rank"),
    [
        ("rank7_trace.json", 7),
        ("rank-7.json.gz", 7),
        ("rank_12_trace.json", 12),
        ("worker3_step_12.1694128201557.pt.trace.json", 3),
        ("sampled_rank-1.json.gz", 1),
        ("host_1234.1700000000.pt.trace.json", None),
        ("rank16777215_trace.json", 2**24 - 1),  # the highest rank there can be
        ("rank16777216_trace.json", None),  # 2^24: no rank, as a trace saying so
        ("rank1000000000000_trace.json", None),
        ("rank" + "9" * 5000 + ".json", None),  # never turned into an int that long
    ],
)
def test_rank_from_file_name(name: str, rank: int | None) -> None:
    assert rank_from_name(Path(name)) == rank


def touch(path: Path, data: bytes = b"{}") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def test_run_folder_windows_in_iteration_order_and_tmp_ignored(tmp_path: Path) -> None:
    for window in ("iteration_10", "iteration_2", "iteration_100"):
        touch(tmp_path / window / "rank0_trace.json")
    touch(tmp_path / "iteration_2" / "rank1_trace.json.tmp")
    touch(tmp_path / "iteration_2" / "notes.txt")
    windows = find_windows(tmp_path)
    assert [w.name for w in windows] == ["iteration_2", "iteration_10", "iteration_100"]
    assert [p.name for p in windows[0].files] == ["rank0_trace.json"]


def test_a_window_folder_is_its_own_single_window(tmp_path: Path) -> None:
    touch(tmp_path / "iteration_5" / "rank1_trace.json.gz")
    touch(tmp_path / "iteration_5" / "rank0_trace.json")
    (window,) = find_windows(tmp_path / "iteration_5")
    assert window.name == "iteration_5"
    assert [p.name for p in window.files] == ["rank0_trace.json", "rank1_trace.json.gz"]


def test_windows_with_the_same_name_are_told_apart_by_their_path(tmp_path: Path) -> None:
    touch(tmp_path / "run1" / "iteration_10" / "rank0_trace.json")
    touch(tmp_path / "run2" / "iteration_10" / "rank0_trace.json")
    assert [w.name for w in find_windows(tmp_path)] == ["run1/iteration_10", "run2/iteration_10"]


def test_no_traces_or_no_folder_is_a_config_error(tmp_path: Path) -> None:
    touch(tmp_path / "readme.txt")
    with pytest.raises(ConfigError, match="no trace files"):
        find_windows(tmp_path)
    with pytest.raises(ConfigError, match="no such file or folder"):
        find_windows(tmp_path / "missing")


def test_gzip_is_detected_by_its_magic_bytes_not_its_name(tmp_path: Path) -> None:
    packed = touch(tmp_path / "rank0_trace.json", gzip.compress(b'{"traceEvents": []}'))
    plain = touch(tmp_path / "rank1_trace.json.gz", b'{"traceEvents": []}')
    with open_trace(packed) as stream:
        assert stream.read() == b'{"traceEvents": []}'
    with open_trace(plain) as stream:
        assert stream.read() == b'{"traceEvents": []}'
