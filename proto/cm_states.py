"""Connection management as one table: the life of one daemon-to-daemon connection.

Every peer link runs this machine next to the EP table (proto.ep_states): the EP table says what
the consumer sees, this one what may happen on the wire. The active side sends CONN_REQ and
waits; the passive side turns a CONN_REQ into a CR (a CONNECTION_REQUEST event on a PSP or RSP),
answers CONN_ACCEPT or CONN_REJECT when the consumer decides, and is connected at RTU. A
DISCONNECT, a timeout or a lost stream ends the connection from any state.

``transition(state, input)`` gives the next state; a frame not in the table is a protocol
error of the peer (UnexpectedFrame), which closes that one link.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Final

from proto.errors import UnexpectedFrame


class CmState(Enum):
    """Where one connection stands."""

    IDLE = auto()  # a new stream: nothing sent or received yet
    REQ_SENT = auto()  # active: CONN_REQ sent (or queued behind the TCP connect)
    REQ_RCVD = auto()  # passive: a CR waits for dat_cr_accept or dat_cr_reject
    REP_SENT = auto()  # passive: CONN_ACCEPT sent, waiting for RTU
    ESTABLISHED = auto()
    CLOSED = auto()


class CmInput(Enum):
    """What moves a connection: a consumer call, a frame from the peer, or the clock."""

    CONNECT = auto()  # dat_ep_connect
    CONN_REQ = auto()  # a CONN_REQ arrived and found a listener
    REFUSE = auto()  # a CONN_REQ found no listener (or a full backlog): rejected at once
    ACCEPT = auto()  # dat_cr_accept
    REJECT = auto()  # dat_cr_reject
    CONN_ACCEPT = auto()  # the peer accepted
    CONN_REJECT = auto()  # the peer (or its daemon) rejected
    RTU = auto()  # the active side confirmed
    DISCONNECT = auto()  # this side disconnects (or frees the EP)
    PEER_DISCONNECT = auto()  # a DISCONNECT arrived
    TIMEOUT = auto()  # dat_ep_connect's timeout expired
    LOST = auto()  # the stream ended, was reset, or its heartbeat stopped


S, In = CmState, CmInput

TABLE: Final[dict[tuple[CmState, CmInput], CmState]] = {
    (S.IDLE, In.CONNECT): S.REQ_SENT,
    (S.IDLE, In.CONN_REQ): S.REQ_RCVD,
    (S.IDLE, In.REFUSE): S.CLOSED,
    (S.REQ_SENT, In.CONN_ACCEPT): S.ESTABLISHED,
    (S.REQ_SENT, In.CONN_REJECT): S.CLOSED,
    (S.REQ_SENT, In.TIMEOUT): S.CLOSED,
    (S.REQ_RCVD, In.ACCEPT): S.REP_SENT,
    (S.REQ_RCVD, In.REJECT): S.CLOSED,
    (S.REP_SENT, In.RTU): S.ESTABLISHED,
    (S.ESTABLISHED, In.PEER_DISCONNECT): S.CLOSED,
}
for _state in (S.IDLE, S.REQ_SENT, S.REQ_RCVD, S.REP_SENT, S.ESTABLISHED):
    TABLE[(_state, In.DISCONNECT)] = S.CLOSED
for _state in (S.REQ_SENT, S.REQ_RCVD, S.REP_SENT):
    TABLE[(_state, In.PEER_DISCONNECT)] = S.CLOSED  # given up before it was made
for _state in S:
    TABLE[(_state, In.LOST)] = S.CLOSED
TABLE[(S.CLOSED, In.DISCONNECT)] = S.CLOSED  # closing twice is harmless

FROM_PEER: Final = frozenset(
    {In.CONN_REQ, In.CONN_ACCEPT, In.CONN_REJECT, In.RTU, In.PEER_DISCONNECT, In.REFUSE}
)
"""Inputs a peer's frame causes: out of place, they are the peer's protocol error."""


class CmError(Exception):
    """A local input the connection's state does not allow: a bug of the daemon itself."""


def transition(state: CmState, what: CmInput) -> CmState:
    """The next state, or UnexpectedFrame (peer input) / CmError (local input)."""
    try:
        return TABLE[(state, what)]
    except KeyError:
        if what in FROM_PEER:
            raise UnexpectedFrame(f"{what.name} on a connection in {state.name}") from None
        raise CmError(f"{what.name} on a connection in {state.name}") from None
