"""Which proven node each ROUTER routing id belongs to (pure: no sockets, no clock).

Under CurveZMQ the aggregator never trusts a routing id the peer chose: a message's node is
the one its handshake proved (ZAP User-Id). The first proven node to speak on a routing id
owns it. A message of another node on it (it took the id over, ROUTER_HANDOVER, or found it
squatted) is refused, and the id then belongs to no one: nothing more is sent to it for its
owner, who is answered again once it speaks, from wherever libzmq now routes it; the next
node to speak on the id owns it (so a squatter never locks the owner out of its own id).
Replies go only to the routing id a node last spoke from.
Without a proven node (plain ZeroMQ) the routing id is the node, and every id is routable.
Stream ids are the node's own too: the aggregator keys a stream by `own_stream(node, id)`, so
no node can claim, or pre-empt, the id of another node's stream.
"""

from __future__ import annotations

import hashlib
from typing import Final

_MAX_LINKS: Final = 4096  # routing ids remembered (the oldest forgotten first)
_NOBODY: Final = ""  # the owner of a routing id taken over (no node name is empty)
_MAX_SAID: Final = 1024  # (node, reason) refusals logged once each, then quiet


def own_stream(node: str, stream: str) -> str:
    """The aggregator's key of `node`'s stream `stream`: 32 hex digits, like a stream id."""
    digest = hashlib.blake2b(digest_size=16, person=b"commscope-stream")
    digest.update(node.encode())
    digest.update(b"\0")
    digest.update(stream.encode())
    return digest.hexdigest()


class Links:
    def __init__(self, limit: int = _MAX_LINKS) -> None:
        self.limit = limit
        self._node_of: dict[bytes, str] = {}  # routing id -> the proven node that owns it
        self._current: dict[str, bytes] = {}  # node -> the routing id it last spoke from
        self._said: set[tuple[str, str]] = set()

    def claim(self, identity: bytes, node: str) -> str | None:
        """`node` (proven) speaks on `identity`: None if it may (the id is then its current
        one), else the other node that owned the id (refused)."""
        owner = self._node_of.get(identity)
        if owner and owner != node:
            self._forget(identity)
            self._node_of[identity] = _NOBODY  # taken over: the owner's replies wait for it
            return owner
        self._node_of.pop(identity, None)  # most recently used last
        self._node_of[identity] = node
        self._current[node] = identity
        if len(self._node_of) > self.limit:
            self._forget(next(iter(self._node_of)))
        return None

    def routable(self, identity: bytes) -> bool:
        """Whether a reply may go to `identity`: its owner's current id, or never proven."""
        owner = self._node_of.get(identity)
        return owner is None or self._current.get(owner) == identity

    def owner(self, identity: bytes) -> str | None:
        return self._node_of.get(identity) or None

    def first(self, node: str, reason: str) -> bool:
        """Whether this (node, reason) refusal is the first of its kind (to be logged)."""
        key = (node, reason)
        if key in self._said or len(self._said) > _MAX_SAID:
            return False
        self._said.add(key)
        return True

    def _forget(self, identity: bytes) -> None:
        node = self._node_of.pop(identity)
        if self._current.get(node) == identity:
            del self._current[node]
