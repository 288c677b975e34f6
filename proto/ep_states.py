"""The endpoint state machine as one table (DAT_REFERENCE.md section 3).

``transition(state, input)`` gives the next state and the connection event to post on the
connect EVD (or None); a pair not in the table is refused with DAT_INVALID_STATE carrying the
EP-state subtype of the current state.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Final

from proto.constants import DatReturnSubtype as Sub
from proto.constants import EpState as S
from proto.constants import EventNumber as E
from proto.errors import DatInvalidState


class EpInput(Enum):
    """What can happen to an endpoint: a consumer call or a connection-management message."""

    CONNECT = auto()  # dat_ep_connect
    RSP_CREATE = auto()  # dat_rsp_create on this EP
    RSP_FREE = auto()  # dat_rsp_free
    REQUEST_ARRIVED = auto()  # a connection request reached the EP's RSP
    ACCEPT = auto()  # dat_cr_accept with this EP
    REJECT = auto()  # dat_cr_reject of the EP's CR
    PEER_ACCEPTED = auto()  # active side: the peer accepted
    RTU = auto()  # passive side: the active side confirmed
    PEER_REJECTED = auto()
    NON_PEER_REJECTED = auto()
    UNREACHABLE = auto()
    CONNECT_TIMEOUT = auto()
    ACCEPT_FAILED = auto()  # passive side: active side vanished before RTU
    DISCONNECT_GRACEFUL = auto()
    DISCONNECT_ABRUPT = auto()
    DRAINED = auto()  # graceful disconnect: the last in-flight DTO completed
    PEER_DISCONNECTED = auto()
    BROKEN = auto()  # DTO error, bad frame, lost stream
    RESET = auto()  # dat_ep_reset


_ANY_CONNECTED = (S.CONNECTED, S.DISCONNECT_PENDING)
_PENDING = (S.ACTIVE_CONNECTION_PENDING, S.COMPLETION_PENDING)

TABLE: Final[dict[tuple[S, EpInput], tuple[S, E | None]]] = {
    (S.UNCONNECTED, EpInput.CONNECT): (S.ACTIVE_CONNECTION_PENDING, None),
    (S.UNCONNECTED, EpInput.RSP_CREATE): (S.RESERVED, None),
    (S.RESERVED, EpInput.RSP_FREE): (S.UNCONNECTED, None),
    (S.RESERVED, EpInput.REQUEST_ARRIVED): (S.PASSIVE_CONNECTION_PENDING, None),
    (S.UNCONNECTED, EpInput.ACCEPT): (S.COMPLETION_PENDING, None),
    (S.PASSIVE_CONNECTION_PENDING, EpInput.ACCEPT): (S.COMPLETION_PENDING, None),
    (S.TENTATIVE_CONNECTION_PENDING, EpInput.ACCEPT): (S.COMPLETION_PENDING, None),
    (S.PASSIVE_CONNECTION_PENDING, EpInput.REJECT): (S.UNCONNECTED, None),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.PEER_ACCEPTED): (
        S.CONNECTED,
        E.CONNECTION_EVENT_ESTABLISHED,
    ),
    (S.COMPLETION_PENDING, EpInput.RTU): (S.CONNECTED, E.CONNECTION_EVENT_ESTABLISHED),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.PEER_REJECTED): (
        S.DISCONNECTED,
        E.CONNECTION_EVENT_PEER_REJECTED,
    ),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.NON_PEER_REJECTED): (
        S.DISCONNECTED,
        E.CONNECTION_EVENT_NON_PEER_REJECTED,
    ),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.UNREACHABLE): (
        S.DISCONNECTED,
        E.CONNECTION_EVENT_UNREACHABLE,
    ),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.CONNECT_TIMEOUT): (
        S.DISCONNECTED,
        E.CONNECTION_EVENT_TIMED_OUT,
    ),
    (S.COMPLETION_PENDING, EpInput.ACCEPT_FAILED): (
        S.DISCONNECTED,
        E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR,
    ),
    (S.CONNECTED, EpInput.DISCONNECT_GRACEFUL): (S.DISCONNECT_PENDING, None),
    (S.DISCONNECT_PENDING, EpInput.DRAINED): (S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED),
    (S.DISCONNECTED, EpInput.DISCONNECT_GRACEFUL): (S.DISCONNECTED, None),
    (S.DISCONNECTED, EpInput.DISCONNECT_ABRUPT): (S.DISCONNECTED, None),
    (S.UNCONNECTED, EpInput.RESET): (S.UNCONNECTED, None),
    (S.DISCONNECTED, EpInput.RESET): (S.UNCONNECTED, None),
}
for _st in (*_ANY_CONNECTED, *_PENDING):
    TABLE[(_st, EpInput.DISCONNECT_ABRUPT)] = (S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED)
for _st in _ANY_CONNECTED:
    TABLE[(_st, EpInput.PEER_DISCONNECTED)] = (S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED)
for _st in (*_ANY_CONNECTED, *_PENDING, S.PASSIVE_CONNECTION_PENDING):
    TABLE[(_st, EpInput.BROKEN)] = (S.DISCONNECTED, E.CONNECTION_EVENT_BROKEN)
# an abrupt disconnect of a pending connect aborts it (DAT_REFERENCE.md section 3)
TABLE[(S.ACTIVE_CONNECTION_PENDING, EpInput.DISCONNECT_GRACEFUL)] = (
    S.DISCONNECTED,
    E.CONNECTION_EVENT_DISCONNECTED,
)
TABLE[(S.COMPLETION_PENDING, EpInput.DISCONNECT_GRACEFUL)] = (
    S.DISCONNECTED,
    E.CONNECTION_EVENT_DISCONNECTED,
)
# a peer that disconnects before RTU is an accept that failed
TABLE[(S.COMPLETION_PENDING, EpInput.PEER_DISCONNECTED)] = (
    S.DISCONNECTED,
    E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR,
)

FREE_REFUSED: Final = frozenset(
    {S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.TENTATIVE_CONNECTION_PENDING}
)
"""dat_ep_free is valid in every state but these."""

REQUEST_POST_STATES: Final = frozenset({S.CONNECTED, S.DISCONNECTED})
"""States in which send, RDMA and bind may be posted (DISCONNECTED: posted, then flushed)."""

STATE_SUBTYPE: Final[dict[S, Sub]] = {
    S.UNCONNECTED: Sub.INVALID_STATE_EP_UNCONNECTED,
    S.ACTIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_ACTCONNPENDING,
    S.PASSIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_PASSCONNPENDING,
    S.TENTATIVE_CONNECTION_PENDING: Sub.INVALID_STATE_EP_TENTCONNPENDING,
    S.CONNECTED: Sub.INVALID_STATE_EP_CONNECTED,
    S.DISCONNECTED: Sub.INVALID_STATE_EP_DISCONNECTED,
    S.RESERVED: Sub.INVALID_STATE_EP_RESERVED,
    S.COMPLETION_PENDING: Sub.INVALID_STATE_EP_COMPLPENDING,
    S.DISCONNECT_PENDING: Sub.INVALID_STATE_EP_DISCPENDING,
}


def state_error(state: S, what: str) -> DatInvalidState:
    """DAT_INVALID_STATE with the subtype naming the endpoint's current state."""
    return DatInvalidState(
        STATE_SUBTYPE.get(state, Sub.NO_SUBTYPE), f"{what} not valid in {state.name}"
    )


def transition(state: S, event: EpInput) -> tuple[S, E | None]:
    """Next state and connection event for ``event`` in ``state``, or DAT_INVALID_STATE."""
    try:
        return TABLE[(state, event)]
    except KeyError:
        raise state_error(state, event.name) from None
