"""proto.ep_states: the endpoint state table (DESIGN.md section 8, layer 3).

Every (EpState, EpInput) pair either transitions exactly as TABLE says or raises
DAT_INVALID_STATE with the subtype naming the current state; named rows of DAT_REFERENCE.md
section 3 are pinned explicitly so a wrong table row cannot hide behind the table itself.
"""

from __future__ import annotations

import itertools

import pytest

from proto.constants import DatReturnSubtype as Sub
from proto.constants import DatReturnType
from proto.constants import EpState as S
from proto.constants import EventNumber as E
from proto.ep_states import (
    FREE_REFUSED,
    STATE_SUBTYPE,
    TABLE,
    EpInput,
    state_error,
    transition,
)
from proto.errors import DatInvalidState, error_from_code

ALL_PAIRS = [
    pytest.param(state, what, id=f"{state.name}-{what.name}")
    for state, what in itertools.product(S, EpInput)
]

CONNECTION_EVENTS = {e for e in E if e.name.startswith("CONNECTION_EVENT_")}


# --- every pair --------------------------------------------------------------------------------


@pytest.mark.parametrize(("state", "what"), ALL_PAIRS)
def test_every_state_input_pair(state: S, what: EpInput) -> None:
    if (state, what) in TABLE:
        assert transition(state, what) == TABLE[(state, what)]
        return
    with pytest.raises(DatInvalidState) as info:
        transition(state, what)
    err = info.value
    assert type(err) is DatInvalidState
    assert err.subtype == STATE_SUBTYPE.get(state, Sub.NO_SUBTYPE)
    assert err.code == 0x80070000 | err.subtype
    assert state.name in err.message and what.name in err.message


def test_table_shape() -> None:
    """Keys are (EpState, EpInput); values are (EpState, a connection event or None)."""
    assert TABLE
    for (state, what), (nxt, ev) in TABLE.items():
        assert isinstance(state, S) and isinstance(what, EpInput)
        assert isinstance(nxt, S)
        assert ev is None or ev in CONNECTION_EVENTS, (state, what, ev)


def test_table_only_uses_configured_states() -> None:
    """The UNCONFIGURED_* states are never entered or left through the table."""
    states = {s for key in TABLE for s in (key[0], TABLE[key][0])}
    assert not {s for s in states if s.name.startswith("UNCONFIGURED_")}
    assert states <= set(STATE_SUBTYPE)


def test_entering_disconnected_from_elsewhere_always_posts_an_event() -> None:
    """A connection that ends (or a connect that fails) is always reported on the connect EVD,
    except when the consumer itself gracefully disconnects an already disconnected EP."""
    for (state, what), (nxt, ev) in TABLE.items():
        if nxt is S.DISCONNECTED and state is not S.DISCONNECTED:
            assert ev is not None, (state, what)
        if state is S.DISCONNECTED:
            assert ev is None, (state, what)


# --- named rows of DAT_REFERENCE.md section 3 -----------------------------------------------

REFERENCE_ROWS: list[tuple[S, EpInput, S, E | None]] = [
    (S.UNCONNECTED, EpInput.CONNECT, S.ACTIVE_CONNECTION_PENDING, None),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.PEER_ACCEPTED,
        S.CONNECTED,
        E.CONNECTION_EVENT_ESTABLISHED,
    ),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.PEER_REJECTED,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_PEER_REJECTED,
    ),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.NON_PEER_REJECTED,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_NON_PEER_REJECTED,
    ),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.UNREACHABLE,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_UNREACHABLE,
    ),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.CONNECT_TIMEOUT,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_TIMED_OUT,
    ),
    # ep_disconnect (either flag) aborts a pending connect and posts DISCONNECTED at once
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.DISCONNECT_ABRUPT,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_DISCONNECTED,
    ),
    (
        S.ACTIVE_CONNECTION_PENDING,
        EpInput.DISCONNECT_GRACEFUL,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_DISCONNECTED,
    ),
    (
        S.COMPLETION_PENDING,
        EpInput.DISCONNECT_ABRUPT,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_DISCONNECTED,
    ),
    (
        S.COMPLETION_PENDING,
        EpInput.DISCONNECT_GRACEFUL,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_DISCONNECTED,
    ),
    (S.UNCONNECTED, EpInput.RSP_CREATE, S.RESERVED, None),
    (S.RESERVED, EpInput.RSP_FREE, S.UNCONNECTED, None),
    (S.RESERVED, EpInput.REQUEST_ARRIVED, S.PASSIVE_CONNECTION_PENDING, None),
    (S.UNCONNECTED, EpInput.ACCEPT, S.COMPLETION_PENDING, None),
    (S.PASSIVE_CONNECTION_PENDING, EpInput.ACCEPT, S.COMPLETION_PENDING, None),
    (S.TENTATIVE_CONNECTION_PENDING, EpInput.ACCEPT, S.COMPLETION_PENDING, None),
    (S.COMPLETION_PENDING, EpInput.RTU, S.CONNECTED, E.CONNECTION_EVENT_ESTABLISHED),
    (
        S.COMPLETION_PENDING,
        EpInput.ACCEPT_FAILED,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_ACCEPT_COMPLETION_ERROR,
    ),
    (S.PASSIVE_CONNECTION_PENDING, EpInput.REJECT, S.UNCONNECTED, None),
    (S.CONNECTED, EpInput.DISCONNECT_GRACEFUL, S.DISCONNECT_PENDING, None),
    (S.DISCONNECT_PENDING, EpInput.DRAINED, S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED),
    (S.CONNECTED, EpInput.DISCONNECT_ABRUPT, S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED),
    (
        S.DISCONNECT_PENDING,
        EpInput.DISCONNECT_ABRUPT,
        S.DISCONNECTED,
        E.CONNECTION_EVENT_DISCONNECTED,
    ),
    (S.CONNECTED, EpInput.PEER_DISCONNECTED, S.DISCONNECTED, E.CONNECTION_EVENT_DISCONNECTED),
    (S.CONNECTED, EpInput.BROKEN, S.DISCONNECTED, E.CONNECTION_EVENT_BROKEN),
    (S.ACTIVE_CONNECTION_PENDING, EpInput.BROKEN, S.DISCONNECTED, E.CONNECTION_EVENT_BROKEN),
    (S.PASSIVE_CONNECTION_PENDING, EpInput.BROKEN, S.DISCONNECTED, E.CONNECTION_EVENT_BROKEN),
    (S.COMPLETION_PENDING, EpInput.BROKEN, S.DISCONNECTED, E.CONNECTION_EVENT_BROKEN),
    (S.UNCONNECTED, EpInput.RESET, S.UNCONNECTED, None),
    (S.DISCONNECTED, EpInput.RESET, S.UNCONNECTED, None),
]


@pytest.mark.parametrize(
    ("state", "what", "nxt", "ev"),
    [pytest.param(*row, id=f"{row[0].name}-{row[1].name}") for row in REFERENCE_ROWS],
)
def test_reference_row(state: S, what: EpInput, nxt: S, ev: E | None) -> None:
    assert transition(state, what) == (nxt, ev)


def test_connect_then_accepted_then_abrupt_disconnect() -> None:
    state = S.UNCONNECTED
    events: list[E | None] = []
    for what in (EpInput.CONNECT, EpInput.PEER_ACCEPTED, EpInput.DISCONNECT_ABRUPT, EpInput.RESET):
        state, ev = transition(state, what)
        events.append(ev)
    assert state is S.UNCONNECTED
    assert events == [
        None,
        E.CONNECTION_EVENT_ESTABLISHED,
        E.CONNECTION_EVENT_DISCONNECTED,
        None,
    ]


def test_rejected_connect_needs_reset_before_reconnecting() -> None:
    state, ev = transition(S.UNCONNECTED, EpInput.CONNECT)
    state, ev = transition(state, EpInput.PEER_REJECTED)
    assert (state, ev) == (S.DISCONNECTED, E.CONNECTION_EVENT_PEER_REJECTED)
    with pytest.raises(DatInvalidState) as info:
        transition(state, EpInput.CONNECT)
    assert info.value.subtype is Sub.INVALID_STATE_EP_DISCONNECTED
    assert transition(transition(state, EpInput.RESET)[0], EpInput.CONNECT)[0] is (
        S.ACTIVE_CONNECTION_PENDING
    )


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.name)
def test_reset_only_from_unconnected_or_disconnected(state: S) -> None:
    if state in (S.UNCONNECTED, S.DISCONNECTED):
        assert transition(state, EpInput.RESET) == (S.UNCONNECTED, None)
    else:
        with pytest.raises(DatInvalidState) as info:
            transition(state, EpInput.RESET)
        assert info.value.subtype == STATE_SUBTYPE.get(state, Sub.NO_SUBTYPE)


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.name)
def test_connect_only_from_unconnected(state: S) -> None:
    if state is S.UNCONNECTED:
        assert transition(state, EpInput.CONNECT)[0] is S.ACTIVE_CONNECTION_PENDING
    else:
        with pytest.raises(DatInvalidState):
            transition(state, EpInput.CONNECT)


def test_free_refused_is_exactly_reserved_and_passive_states() -> None:
    assert (
        frozenset({S.RESERVED, S.PASSIVE_CONNECTION_PENDING, S.TENTATIVE_CONNECTION_PENDING})
        == FREE_REFUSED
    )


# --- state_error -------------------------------------------------------------------------------


def test_state_subtypes_name_the_state() -> None:
    assert STATE_SUBTYPE == {
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


@pytest.mark.parametrize("state", list(S), ids=lambda s: s.name)
def test_state_error_code(state: S) -> None:
    err = state_error(state, "dat_ep_something")
    subtype = STATE_SUBTYPE.get(state, Sub.NO_SUBTYPE)
    assert type(err) is DatInvalidState
    assert err.type is DatReturnType.INVALID_STATE
    assert err.subtype == subtype
    assert err.code == 0x80070000 | subtype
    assert "dat_ep_something" in err.message and state.name in err.message
    rebuilt = error_from_code(err.code)
    assert type(rebuilt) is DatInvalidState and rebuilt.subtype == subtype


def test_state_error_code_examples() -> None:
    assert state_error(S.CONNECTED, "x").code == 0x80070033
    assert state_error(S.DISCONNECT_PENDING, "x").code == 0x80070037
    assert state_error(S.UNCONFIGURED_UNCONNECTED, "x").code == 0x80070000
