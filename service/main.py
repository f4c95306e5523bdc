"""The `commscope` entry point (shell): stop signals are caught before the slow imports.

Loading the CLI and its daemons takes ~0.4 s; a SIGTERM (or Ctrl-C) in that time would kill a
daemon with 143 and no end-of-run. For `collect` and `aggregate` the handlers go in first and
only record the signal, so the daemon starts, drains and ends its run as for any SIGTERM; the
other commands keep Python's usual signal behaviour. Output piped into a reader that stops
early (`| head`) ends quietly with 141, as a shell tool killed by SIGPIPE does.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Sequence
from typing import Final

DAEMONS: Final = frozenset({"collect", "aggregate"})
SIGPIPE_EXIT: Final = 128 + signal.SIGPIPE  # what a shell reports for a reader that left


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    stop = threading.Event() if args and args[0] in DAEMONS else None
    if stop is not None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: stop.set())
    from commscope.service.cli import main as run  # noqa: PLC0415 (the slow part, on purpose)

    try:
        return run(args, stop)
    except BrokenPipeError:  # `commscope report DIR --print | head`: the reader left early
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no error at exit
        return SIGPIPE_EXIT


if __name__ == "__main__":
    sys.exit(main())
