"""The report files: text, JSON and HTML side by side, and never one report over another's,
even when two are written in the same second; a report folder that refuses the writes (no
space left, a read-only mount) is one line (ConfigError) and leaves no part of the reports
behind. The real read-only mount and full file system: tests/service/test_readonly.py."""

from __future__ import annotations

import errno
import json
from datetime import UTC, datetime
from pathlib import Path

import pytest
from commscope.exporters import text
from commscope.exporters.files import write_beside, write_reports
from commscope.model.errors import ConfigError
from commscope.model.schema import Report, RunConfig
from commscope.pipeline.report import Options
from commscope.service.offline import analyse

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"
NOW = datetime(2026, 11, 24, 12, 0, 5, tzinfo=UTC)
STEM = "20261124_120005_run_cpu2"


def two_ranks(model: str = "") -> Report:
    return Report(world_size=2, ranks=[0, 1], config=RunConfig(backend="gloo", model=model))


def test_three_reports_in_one_second_take_three_names(tmp_path: Path) -> None:
    written = [write_reports(two_ranks(), tmp_path, "run", NOW) for _ in range(3)]
    stems = [[p.name for p in paths] for paths in written]
    assert stems == [
        [f"{stem}.txt", f"{stem}.json", f"{stem}.html"] for stem in (STEM, f"{STEM}-2", f"{STEM}-3")
    ]
    assert len(list(tmp_path.iterdir())) == 9


def test_a_name_any_of_whose_files_exists_is_passed_over(tmp_path: Path) -> None:
    """A stray .html of the first name (another tool's, or a report half deleted): the report
    takes the next name and leaves the stray file alone; no empty .json is left behind."""
    (tmp_path / f"{STEM}.html").write_text("mine")
    paths = write_reports(two_ranks(), tmp_path, "run", NOW)
    assert [p.name for p in paths] == [f"{STEM}-2.txt", f"{STEM}-2.json", f"{STEM}-2.html"]
    assert (tmp_path / f"{STEM}.html").read_text() == "mine"
    assert not (tmp_path / f"{STEM}.json").exists()


def test_write_beside_puts_the_text_and_html_next_to_the_json(tmp_path: Path) -> None:
    report = two_ranks("llama3.1")
    paths = write_beside(report, tmp_path / "merged.v2.json")
    assert [p.name for p in paths] == ["merged.v2.txt", "merged.v2.json", "merged.v2.html"]
    assert json.loads(paths[1].read_text())["ranks"] == [0, 1]
    assert paths[0].read_text() == text.render(report)
    assert "<html" in paths[2].read_text().lower()


def test_a_write_that_fails_is_one_line_and_leaves_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The .txt is written, the .json finds no space: the error names the folder (a failed
    write names no file) and the reason, and the .txt is removed again."""
    report = analyse(SAMPLE, Options())

    def full(self: Path, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_bytes", full)
    with pytest.raises(ConfigError) as caught:
        write_reports(report, tmp_path, "run")
    assert str(caught.value) == f"cannot write {tmp_path}: No space left on device"
    assert list(tmp_path.iterdir()) == []


def test_a_file_that_cannot_be_opened_is_named(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = analyse(SAMPLE, Options())

    def read_only(self: Path, data: str, encoding: str) -> int:
        raise OSError(errno.EROFS, "Read-only file system", str(self))

    monkeypatch.setattr(Path, "write_text", read_only)
    with pytest.raises(ConfigError, match=r"^cannot write .*\.txt: Read-only file system$"):
        write_reports(report, tmp_path, "run")
