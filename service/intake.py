"""Who speaks, who may start a stream, who is in the run and when it is over (pure: `now` is
given): the aggregator's admission and membership.

A message speaks for the node its CurveZMQ handshake proved, else for its routing id; a
proven node on a routing id another proven node owns is refused (`Links`). A node starts
only its own streams, within the caps on open streams (per node and in all). An `Intake`
also knows the nodes that said Hello or sent end-of-run (and whether each ended, and
which collector instance ended it), the latest heartbeat of each node, and when each known
node was last heard from. It decides what a Hello, a Heartbeat or an EndOfRun does (a
`Decision`: the reply to send, whether the node cap refused it, whether the membership must
be stored), and whether the run is over: every node seen has ended or fallen silent (nothing
heard for `end_grace_s`), and with `expect_nodes` N at least N nodes are known; without it,
no node still at work (a recent heartbeat, or a stream open) holds it up. A Hello from the
collector instance that ended its node is one of that collector's resends, not a new start.
The shell (`service/aggregate.py`) moves bytes, stores the membership and logs; it hands
the nodes with streams open in, since streams are the `Aggregation`'s.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum

from commscope.model.schema import CollectorStats, Reject, RunAck, ToCollector, Welcome
from commscope.service.links import Links


@dataclass(frozen=True)
class Rules:
    """The caps and times admission, membership and end-of-run follow (the aggregator's flags)."""

    expect_nodes: int = 0  # --expect-nodes (0: whoever said Hello)
    end_grace_s: float = 300.0  # --end-grace
    heartbeat_timeout_s: float = 30.0  # a heartbeat this old no longer says "at work"
    max_nodes: int = 1024  # node names kept (Hellos/end-of-runs and heartbeats each)
    max_streams_per_node: int = 256  # open streams of one node
    max_streams: int = 4096  # open streams in all


@dataclass(frozen=True)
class Decision:
    """What a membership message does: the reply (None: none), whether it was refused by
    the cap on node names, whether the nodes changed (the shell stores them)."""

    reply: ToCollector | None = None
    refused: bool = False
    save: bool = False


@dataclass(frozen=True)
class Taken:
    """A proven `node` spoke on a routing id `owner` owns: refused."""

    node: str
    owner: str


class Admission(Enum):
    """Whether a StreamStart may open its stream (the shell counts a refusal by reason)."""

    OPEN = "open"
    NOT_OWN_NODE = "not own node"  # it names another node than the speaker
    TOO_MANY_STREAMS = "too many streams"  # over the per-node or total cap of open streams


@dataclass(frozen=True)
class Silenced:
    """A node that fell silent without end-of-run (told once, until it is heard again)."""

    node: str
    silent_s: float


class Intake:
    def __init__(
        self,
        rules: Rules,
        welcome: Welcome,
        now: float,
        nodes: dict[str, bool] | None = None,
        ended_by: dict[str, str] | None = None,
    ) -> None:
        self.rules = rules
        self.welcome = welcome
        self.nodes: dict[str, bool] = dict(nodes or {})  # node -> it sent end-of-run
        self.ended_by: dict[str, str] = dict(ended_by or {})  # node -> the instance that ended it
        self.heartbeats: dict[str, tuple[CollectorStats, float]] = {}  # node -> (stats, when)
        self._greeted: dict[str, str] = {}  # node -> the collector instance of its last Hello
        self._heard = dict.fromkeys(self.nodes, now)  # stored nodes: the grace from now
        self._gone: set[str] = set()  # silent nodes already told (`silenced`)
        self._silenced: list[Silenced] = []
        self.links = Links()  # routing id -> the proven node that owns it

    # ---------------------------------------------------------------- admission
    def speaker(self, identity: bytes, peer: str | None) -> str | Taken:
        """The node a message speaks for: the proven `peer`, else (plain ZeroMQ) its routing
        id; `Taken` if `peer` spoke on a routing id another proven node owns."""
        if peer is None:
            return identity.decode("utf-8", "replace")
        owner = self.links.claim(identity, peer)
        return peer if owner is None else Taken(peer, owner)

    def may_start(self, speaker: str, node: str, open_all: int, open_own: int) -> Admission:
        """Whether `speaker` may open a stream of `node`, with `open_all` streams open in all
        and `open_own` of its own."""
        if node != speaker:
            return Admission.NOT_OWN_NODE
        rules = self.rules
        if open_all >= rules.max_streams or open_own >= rules.max_streams_per_node:
            return Admission.TOO_MANY_STREAMS
        return Admission.OPEN

    # ---------------------------------------------------------------- messages
    def hello(self, node: str, instance: str) -> Decision:
        """A node joins (again, if it had ended: a collector restarted); a Hello from the
        instance that ended the node is a resend and leaves it ended."""
        if not self._may_join(node):
            return self._over_cap()
        resent = self.nodes.get(node) and self.ended_by.get(node) == instance
        self._greeted[node] = instance
        opened = not resent and self.nodes.get(node) is not False
        if opened:
            self.nodes[node] = False
        return Decision(reply=self.welcome, save=opened)

    def heartbeat(self, node: str, stats: CollectorStats, now: float) -> Decision:
        if node not in self.heartbeats and len(self.heartbeats) >= self.rules.max_nodes:
            return Decision(refused=True)
        self.heartbeats[node] = (stats, now)
        return Decision()

    def end_of_run(self, node: str, instance: str | None) -> Decision:
        """The node ended, by `instance` (else the instance of its last Hello, if any)."""
        if not self._may_join(node):
            return self._over_cap()
        self.nodes[node] = True
        self.ended_by.pop(node, None)
        if (by := instance or self._greeted.get(node)) is not None:
            self.ended_by[node] = by
        return Decision(reply=RunAck(node=node), save=True)

    def heard(self, node: str, now: float) -> bool:
        """A message from `node` was taken: a known node is not silent. True if it was."""
        if node not in self.nodes and node not in self.heartbeats:
            return False
        self._heard[node] = now
        back = node in self._gone
        self._gone.discard(node)
        return back

    def _may_join(self, node: str) -> bool:
        return node in self.nodes or len(self.nodes) < self.rules.max_nodes

    def _over_cap(self) -> Decision:
        why = f"more than {self.rules.max_nodes} nodes"
        return Decision(reply=Reject(reason=why), refused=True)

    # ---------------------------------------------------------------- the end of the run
    def over(self, now: float, streaming: Iterable[str] = ()) -> bool:
        """Whether membership ends the run: every node seen ended or silent, at least
        `expect_nodes` of them, and (without it) no node without end-of-run at work."""
        nodes, expect = self.nodes, self.rules.expect_nodes
        silent = self.silent(now)
        return bool(
            nodes
            and all(ended or node in silent for node, ended in nodes.items())
            and len(nodes) >= expect
            and (expect or not self.pending(now, streaming) - silent)
        )

    def silent(self, now: float) -> set[str]:
        """Nodes without end-of-run heard from last `end_grace_s` ago or more: the run no
        longer waits for them (each newly silent one is kept for `silenced`)."""
        limit = now - self.rules.end_grace_s
        silent = {n for n, at in self._heard.items() if at <= limit and not self.nodes.get(n)}
        for node in sorted(silent - self._gone):
            self._silenced.append(Silenced(node, now - self._heard[node]))
        self._gone |= silent
        return silent

    def silenced(self) -> list[Silenced]:
        """The nodes fallen silent since the last call (to be said once)."""
        told, self._silenced = self._silenced, []
        return told

    def pending(self, now: float, streaming: Iterable[str] = ()) -> set[str]:
        """Nodes without end-of-run still at work: a recent heartbeat, or a stream open."""
        live = {node for node, (_, alive) in self.collectors(now).items() if alive}
        return {node for node in live.union(streaming) if not self.nodes.get(node)}

    def collectors(self, now: float) -> dict[str, tuple[CollectorStats, bool]]:
        """Each node's latest heartbeat, and whether it is recent (`heartbeat_timeout_s`)."""
        timeout = self.rules.heartbeat_timeout_s
        return {node: (stats, now - at < timeout) for node, (stats, at) in self.heartbeats.items()}

    def unended(self) -> list[str]:
        """The collectors seen (Hello or heartbeat) that never sent end-of-run."""
        return sorted(n for n in set(self.nodes) | set(self.heartbeats) if not self.nodes.get(n))
