"""The frames a worker of `report --jobs` speaks over its pipes, and what it answers."""

from __future__ import annotations

import io
import pickle
import sys
import threading
from pathlib import Path

import pytest
from commscope.model.errors import DIED
from commscope.service import parallel, pipes
from commscope.service.worker import Failed
from hypothesis import given
from hypothesis import strategies as st

VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)


@given(st.lists(VALUES, max_size=5))
def test_frames_give_back_what_was_sent_in_order_then_none(values: list[object]) -> None:
    stream = io.BytesIO()
    for value in values:
        pipes.send(stream, value)
    stream.seek(0)
    got = []
    while (data := pipes.frame(stream)) is not None:
        got.append(pickle.loads(data))
    assert got == values


@pytest.mark.parametrize("cut", [0, 3, 8, 9, 20])
def test_a_frame_cut_short_is_the_end(cut: int) -> None:
    whole = io.BytesIO()
    pipes.send(whole, "a" * 20)  # 8 bytes of length, then the pickle (over 20 bytes)
    assert pipes.frame(io.BytesIO(whole.getvalue()[:cut])) is None


def loud(window: str, path: Path) -> str:
    """A task that prints (to stdout: the worker's frames must not take it)."""
    print(f"reading {path.name}", flush=True)
    return path.name


def test_what_a_task_prints_stays_out_of_the_frames(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    files = [("w", tmp_path / name) for name in ("a.json", "b.json")]
    assert parallel.outcomes(files, 2, loud, Failed, here=False) == ["a.json", "b.json"]
    assert sorted(capfd.readouterr().err.splitlines()) == ["reading a.json", "reading b.json"]


def unpicklable(window: str, path: Path) -> threading.Lock:
    return threading.Lock()


def test_a_result_that_does_not_pickle_is_an_error_that_says_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="a worker's outcome does not pickle"):
        parallel.outcomes([("w", tmp_path / "a.json")], 1, unpicklable, Failed, here=False)


def test_a_worker_that_cannot_start_its_interpreter_loses_its_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interpreter that exits at once (here: `false`) is a worker that died on every
    file: each is reported failed, the run goes on."""
    monkeypatch.setattr(sys, "executable", "/bin/false")
    files = [("w", tmp_path / name) for name in ("a.json", "b.json")]
    assert parallel.outcomes(files, 2, loud, Failed, here=False) == [Failed(DIED)] * 2
