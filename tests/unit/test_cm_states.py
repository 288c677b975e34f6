"""proto.cm_states: the connection-management table, every (state, input) pair.

A pair in the table moves exactly as the table says; a pair outside it is the peer's protocol
error when a frame caused it, and the daemon's own bug (CmError) when a local input did. The
named rows of the handshake are pinned so a wrong row cannot hide behind the table itself.
"""

from __future__ import annotations

import itertools

import pytest

from proto.cm_states import FROM_PEER, TABLE, CmError, CmInput, CmState, transition
from proto.errors import ProtocolError, UnexpectedFrame

S, In = CmState, CmInput
ALL_PAIRS = [
    pytest.param(state, what, id=f"{state.name}-{what.name}")
    for state, what in itertools.product(CmState, CmInput)
]


@pytest.mark.parametrize(("state", "what"), ALL_PAIRS)
def test_every_state_input_pair(state: CmState, what: CmInput) -> None:
    if (state, what) in TABLE:
        assert transition(state, what) is TABLE[(state, what)]
        return
    expected: type[Exception] = UnexpectedFrame if what in FROM_PEER else CmError
    with pytest.raises(expected) as info:
        transition(state, what)
    assert state.name in str(info.value) and what.name in str(info.value)
    assert isinstance(info.value, ProtocolError) == (what in FROM_PEER)


HANDSHAKE = [
    # active side
    (S.IDLE, In.CONNECT, S.REQ_SENT),
    (S.REQ_SENT, In.CONN_ACCEPT, S.ESTABLISHED),
    (S.REQ_SENT, In.CONN_REJECT, S.CLOSED),
    (S.REQ_SENT, In.TIMEOUT, S.CLOSED),
    # passive side
    (S.IDLE, In.CONN_REQ, S.REQ_RCVD),
    (S.IDLE, In.REFUSE, S.CLOSED),
    (S.REQ_RCVD, In.ACCEPT, S.REP_SENT),
    (S.REQ_RCVD, In.REJECT, S.CLOSED),
    (S.REP_SENT, In.RTU, S.ESTABLISHED),
    # teardown
    (S.ESTABLISHED, In.DISCONNECT, S.CLOSED),
    (S.ESTABLISHED, In.PEER_DISCONNECT, S.CLOSED),
    (S.REP_SENT, In.PEER_DISCONNECT, S.CLOSED),
    (S.CLOSED, In.DISCONNECT, S.CLOSED),
]


@pytest.mark.parametrize(("state", "what", "after"), HANDSHAKE)
def test_named_rows(state: CmState, what: CmInput, after: CmState) -> None:
    assert TABLE[(state, what)] is after


def test_a_lost_stream_closes_from_every_state() -> None:
    assert all(TABLE[(state, In.LOST)] is S.CLOSED for state in CmState)


def test_no_frame_is_accepted_once_closed() -> None:
    for what in FROM_PEER:
        with pytest.raises(UnexpectedFrame):
            transition(S.CLOSED, what)


def test_handshake_steps_out_of_order_are_refused() -> None:
    """A second CONN_REQ on a stream, or an accept of a request never received, is refused."""
    for state in (S.REQ_SENT, S.REQ_RCVD, S.REP_SENT, S.ESTABLISHED):
        with pytest.raises(UnexpectedFrame):
            transition(state, In.CONN_REQ)
    with pytest.raises(CmError):
        transition(S.IDLE, In.ACCEPT)
    with pytest.raises(UnexpectedFrame):
        transition(S.REQ_RCVD, In.RTU)
