"""The events a daemon pushes to its consumers, as typed records.

An EVENTS frame carries a list of events, each the array ``[event_number, *fields]`` of one
record below; ``record_for(number)`` names the record of an event number, and ``encode_event``
/ ``decode_event`` convert. ``evd`` 0 means the event has no EVD to go to (a SUPPRESSed
completion that only frees its queue slot).
"""

from __future__ import annotations

from typing import NamedTuple

from proto.constants import EventNumber
from proto.errors import DatError, MalformedFrame
from proto.schema import parse


class DtoCompletion(NamedTuple):
    """DAT_DTO_COMPLETION_EVENT; ``notify`` False: UNSIGNALLED, it wakes no waiter."""

    evd: int
    ep: int
    cookie: int
    status: int
    length: int
    op: int
    notify: bool


class RmrBindCompletion(NamedTuple):
    """DAT_RMR_BIND_COMPLETION_EVENT."""

    evd: int
    ep: int
    rmr: int
    cookie: int
    status: int
    notify: bool


class ConnectionRequest(NamedTuple):
    """DAT_CONNECTION_REQUEST_EVENT; ``ep`` is the EP the request carries (0: none)."""

    evd: int
    sp: int
    conn_qual: int
    cr: int
    remote_address: str
    private_data: bytes
    ep: int


class ConnectionEvent(NamedTuple):
    """DAT_CONNECTION_EVENT_*: the EP's state after it, and the peer's private data."""

    evd: int
    ep: int
    private_data: bytes
    state: int


class AsyncError(NamedTuple):
    """DAT_ASYNC_ERROR_*: the object concerned and the reason."""

    evd: int
    handle: int
    reason: int


Event = DtoCompletion | RmrBindCompletion | ConnectionRequest | ConnectionEvent | AsyncError

_CONNECTION_EVENTS = frozenset(n for n in EventNumber if n & 0xFF000 == 0x04000)


def record_for(number: EventNumber) -> type[Event]:
    """The record an event number carries."""
    if number == EventNumber.DTO_COMPLETION_EVENT:
        return DtoCompletion
    if number == EventNumber.RMR_BIND_COMPLETION_EVENT:
        return RmrBindCompletion
    if number == EventNumber.CONNECTION_REQUEST_EVENT:
        return ConnectionRequest
    if number in _CONNECTION_EVENTS:
        return ConnectionEvent
    return AsyncError


def encode_event(number: EventNumber, record: Event) -> list[object]:
    """One event as it travels in an EVENTS frame."""
    if not isinstance(record, record_for(number)):
        raise TypeError(f"{number.name} carries {record_for(number).__name__}")
    return [int(number), *record]


def decode_event(raw: object) -> tuple[EventNumber, Event]:
    """Parse one event of an EVENTS frame; a malformed one is a protocol error."""
    if not isinstance(raw, list) or not raw or type(raw[0]) is not int:
        raise MalformedFrame(f"an event is [event_number, *fields], not {raw!r}")
    try:
        number = EventNumber(raw[0])
        return number, parse(record_for(number), raw[1:], number.name)
    except (ValueError, DatError) as err:
        raise MalformedFrame(f"bad event {raw!r}: {err}") from None
