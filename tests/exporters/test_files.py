"""files.py: a report folder that refuses the writes (no space left, a read-only mount) is one
line (ConfigError) and leaves no part of the reports behind. The real read-only mount and full
file system: tests/service/test_readonly.py."""

from __future__ import annotations

import errno
from pathlib import Path

import pytest
from commscope.collector.errors import ConfigError
from commscope.exporters.files import write_reports
from commscope.pipeline.offline import analyse
from commscope.pipeline.report import Options

SAMPLE = Path(__file__).resolve().parents[2] / "samples" / "gloo_ddp_2rank"


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
