"""The progress line: drawn on a terminal, absent when the output is piped."""

from __future__ import annotations

import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from builders import rank_trace, write
from commscope.exporters.progress import TerminalProgress


def test_progress_line_counts_files_bytes_and_events() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, interval_s=0)
    progress.begin(2, 3_000_000)
    progress.advance(1_500_000)
    progress.file_done(1234)
    progress.end()
    last = stream.getvalue().rstrip("\n").split("\r")[-1]
    assert last == "commscope: files 1/2 · 1.50 MB parsed · 1,234 events"


def test_a_shorter_line_is_padded_over_the_longer_one() -> None:
    stream = io.StringIO()
    progress = TerminalProgress(stream, interval_s=0)
    progress.begin(1, 200_000_000)
    progress.advance(99_900_000)  # "99.9 MB", then "150 MB": one character shorter
    progress.advance(50_000_000)
    drawn = stream.getvalue().split("\r")[1:]
    assert drawn[1] == "commscope: files 0/1 · 150 MB parsed · 0 events "
    assert len(drawn[1]) == len(drawn[0])


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux `script` gives a real tty")
def test_progress_is_drawn_on_a_terminal_and_not_when_piped(tmp_path: Path) -> None:
    for rank in (0, 1):
        write(tmp_path / "w" / f"rank{rank}_trace.json", rank_trace(rank, 2))
    command = (
        f"{sys.executable} -m commscope.service.cli report {tmp_path / 'w'} --out {tmp_path / 'o'}"
    )
    on_tty = subprocess.run(
        ["script", "-qec", command, "/dev/null"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert "files 2/2" in on_tty.stdout
    piped = subprocess.run(command.split(), capture_output=True, text=True, timeout=120, check=True)
    assert "files 2/2" not in piped.stderr + piped.stdout
