"""ZeroMQ endpoints given on the command line, checked before any socket sees them (pure).

`endpoint(flag, text)` returns `text` if it is one the daemons can use — `tcp://HOST:PORT`
with a port in 1..65535 (or `*` where the aggregator binds; `*` as the host is left to ZeroMQ),
or `ipc://PATH` — and otherwise raises ConfigError with one line saying what is wrong, so a
typo never surfaces as a ZeroMQ traceback.
"""

from __future__ import annotations

import re
from typing import Final

from commscope.model.errors import ConfigError

_TCP: Final = re.compile(r"tcp://(?P<host>\[[0-9A-Fa-f:.]+\]|[^:/\[\]]+):(?P<port>[^:/]*)")
_EXAMPLE: Final = "tcp://HOST:PORT or ipc://PATH"
# where an unauthenticated link (`--insecure`) is allowed (`service.curve`)
LOOPBACK: Final = "tcp://127.0.0.1, tcp://[::1], tcp://localhost, ipc://, inproc://"


def endpoint(flag: str, text: str, bind: bool = False) -> str:
    """`text` if usable (`bind`: the port may also be `*`, any free one); else ConfigError."""
    if text.startswith("ipc://") and len(text) > len("ipc://"):
        return text
    match = _TCP.fullmatch(text)
    if match is None or any(c.isspace() for c in text):
        raise ConfigError(f"{flag} {text!r}: not an endpoint (expected {_EXAMPLE})")
    port = match["port"]
    if bind and port == "*":
        return text
    if not port.isdigit() or not 1 <= int(port) <= 65535:
        raise ConfigError(f"{flag} {text!r}: port {port!r} is not a number in 1..65535")
    return text
