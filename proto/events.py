"""The events a daemon delivers to its consumers, as typed records.

Each event is one entry of its EVD's event queue (proto.eventq.EQE); ``record_for(number)``
names the record of an event number, and ``encode_event`` / ``decode_event`` convert between a
record and an entry's head and body. ``evd`` 0 means the event has no EVD to go to (a
SUPPRESSed completion: its queue slot is freed by the DONE word alone).
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from typing import Final, NamedTuple, Protocol

from proto import _rows as rows_c
from proto.codec import pack, unpack
from proto.constants import CompletionFlags, DtoCompletionStatus, Dtos, EventNumber
from proto.errors import DatError, MalformedFrame
from proto.eventq import EQE, NOTIFIES, SRQ_RECEIVE, SRQ_TAIL
from proto.hostif import SLOTS, Ring
from proto.schema import parse


class DtoCompletion(NamedTuple):
    """DAT_DTO_COMPLETION_EVENT, or DAT_IB_DTO_EVENT when ``op`` is an IB extension DTO;
    ``notify`` False: UNSIGNALLED, it wakes no waiter; ``immediate``: the 32-bit immediate data
    of a receive an RDMA Write with immediate consumed (Dtos.IB_RECV_IMMED); ``srq``: the SRQ
    the receive was taken from (0: the EP's own)."""

    evd: int
    ep: int
    cookie: int
    status: int
    length: int
    op: int
    notify: bool
    immediate: int = 0
    srq: int = 0


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


class SoftwareEvent(NamedTuple):
    """DAT_SOFTWARE_EVENT: dat_evd_post_se's pointer value."""

    evd: int
    pointer: int


Event = (
    DtoCompletion
    | RmrBindCompletion
    | ConnectionRequest
    | ConnectionEvent
    | AsyncError
    | SoftwareEvent
)
Head = tuple[int, int, int, int, int]
"""An entry's ep, status, cookie, length, aux (proto.eventq.EQE)."""
_NUMBERS = {int(n): n for n in EventNumber}

_CONNECTION_EVENTS = frozenset(n for n in EventNumber if n & 0xFF000 == 0x04000)


IMMEDIATE: Final = struct.Struct("<I")
"""The body of an IB_RECV_IMMED completion: its immediate data."""
_IB_DTOS: Final = int(Dtos.IB_RDMA_WRITE_IMMED)  # the IB extension DTOs start here
_DTO_EVENT: Final = int(EventNumber.DTO_COMPLETION_EVENT)
_IB_DTO_EVENT: Final = int(EventNumber.IB_DTO_EVENT)


def dto_number(op: int) -> EventNumber:
    """The event number a completion of ``op`` carries: DAT_IB_DTO_EVENT for the IB DTOs."""
    return EventNumber.IB_DTO_EVENT if op >= _IB_DTOS else EventNumber.DTO_COMPLETION_EVENT


def record_for(number: EventNumber) -> type[Event]:
    """The record an event number carries."""
    if number in (EventNumber.DTO_COMPLETION_EVENT, EventNumber.IB_DTO_EVENT):
        return DtoCompletion
    if number == EventNumber.RMR_BIND_COMPLETION_EVENT:
        return RmrBindCompletion
    if number == EventNumber.CONNECTION_REQUEST_EVENT:
        return ConnectionRequest
    if number == EventNumber.SOFTWARE_EVENT:
        return SoftwareEvent
    if number in _CONNECTION_EVENTS:
        return ConnectionEvent
    return AsyncError


def dto_entry(
    ep: int, status: int, cookie: int, length: int, op: int, notify: bool
) -> tuple[int, Head]:
    """A DTO completion's entry (flags, head fields), as encode_event gives it; write_dtos
    writes the same entries for the NIC without building either (tests/unit/test_write_dtos)."""
    return (NOTIFIES if notify else 0), (ep, status, cookie, length, op)


class Done(Protocol):
    """What a successful DTO's completion entry takes from it (an Op or a received message)."""

    @property
    def cookie(self) -> int: ...
    @property
    def length(self) -> int: ...
    @property
    def kind(self) -> Dtos: ...
    @property
    def flags(self) -> int: ...


_SUPPRESS: Final = int(CompletionFlags.SUPPRESS)  # plain ints: IntFlag operators are slow
_UNSIGNALLED: Final = int(CompletionFlags.UNSIGNALLED)


def write_dtos(ring: Ring, room: int, ep: int, dtos: Sequence[Done]) -> tuple[int, bool]:
    """Successful completions of EP ``ep``'s ``dtos``, in order, into the queue's next slots
    (at most ``room``; the caller publishes): SUPPRESS gives none, UNSIGNALLED an entry that
    wakes nobody. How many were written, and whether one found no room. dto_entry's layout,
    without its tuples: once per completed operation, so one loop for a run."""
    view, pack_into, mine, written = ring.view, EQE.pack_into, ring.mine, 0
    mask, size = ring.mask, ring.entry_size
    ok = int(DtoCompletionStatus.DTO_SUCCESS)
    for dto in dtos:
        flags = dto.flags
        if flags & _SUPPRESS:
            continue
        if written == room:
            return written, True
        kind = dto.kind
        number = _IB_DTO_EVENT if kind >= _IB_DTOS else _DTO_EVENT
        notify = 0 if flags & _UNSIGNALLED else NOTIFIES
        at = SLOTS + ((mine + written) & mask) * size  # Ring.slot, inline
        pack_into(view, at, number, notify, 0, 0, ep, ok, dto.cookie, dto.length, kind)
        written += 1
    return written, False


Row = tuple[int, ...]
"""A successful completion as a tuple holding its completion flags, cookie and length (at
indices write_rows is told): a plain WQE's fields (plainwqe.PLAIN_AT), or a received Send's
(flags, cookie, length) (RECEIVED_AT)."""
RECEIVED_AT: Final = (0, 1, 2)


def write_rows(
    ring: Ring, room: int, ep: int, kind: int, rows: Sequence[Row], fields: tuple[int, int, int]
) -> tuple[int, bool]:
    """write_dtos of completions of one ``kind`` (a base DTO: a Send, RDMA Write or Read, or
    a receive) given as rows (each's flags, cookie and length at the indices ``fields``), read
    in place: no object per completion, one C call for the run (proto/_rows.c)."""
    return rows_c.write_rows(
        ring.view, ring.mine, ring.mask, ring.entry_size, room, ep, kind, rows, *fields
    )


def encode_event(number: EventNumber, record: Event) -> tuple[int, Head, bytes]:
    """An event as its queue entry: (flags, head fields, body). Completions and software
    events are all head; the others are a msgpack array of their fields after ``evd``."""
    if not isinstance(record, record_for(number)):
        raise TypeError(f"{number.name} carries {record_for(number).__name__}")
    if isinstance(record, DtoCompletion):
        r = record
        if number != dto_number(r.op):
            raise TypeError(f"a completion of DTO {r.op} is not a {number.name}")
        body = IMMEDIATE.pack(r.immediate) if r.op == Dtos.IB_RECV_IMMED else b""
        flags, head = dto_entry(r.ep, r.status, r.cookie, r.length, r.op, r.notify)
        flags, body = srq_marked(flags, body, r.srq)
        return flags, head, body
    if isinstance(record, RmrBindCompletion):
        flags = NOTIFIES if record.notify else 0
        return flags, (record.ep, record.status, record.cookie, 0, record.rmr), b""
    if isinstance(record, SoftwareEvent):
        return NOTIFIES, (0, 0, record.pointer, 0, 0), b""
    return NOTIFIES, (0, 0, 0, 0, 0), pack(list(record[1:]))


def srq_marked(flags: int, body: bytes, srq: int) -> tuple[int, bytes]:
    """A completion's flags and body naming the SRQ its receive came from (unchanged for 0);
    srq_tail reads it back."""
    if not srq:
        return flags, body
    return flags | SRQ_RECEIVE, body + SRQ_TAIL.pack(srq)


def srq_tail(flags: int, op: int, body: bytes | memoryview) -> tuple[int, bytes | memoryview]:
    """A completion's SRQ (0: none) and the rest of its body; the flag on anything but a
    receive, or without its 4 bytes, is a protocol error."""
    if not flags & SRQ_RECEIVE:
        return 0, body
    if op not in (Dtos.RECEIVE, Dtos.IB_RECV_IMMED) or len(body) < SRQ_TAIL.size:
        raise MalformedFrame(f"an SRQ receive flag on DTO {op} with a {len(body)}-byte body")
    (srq,) = SRQ_TAIL.unpack_from(body, len(body) - SRQ_TAIL.size)
    return srq, body[: len(body) - SRQ_TAIL.size]


def decode_event(
    evd: int, raw_number: int, flags: int, head: Head, body: bytes | memoryview
) -> tuple[EventNumber, Event]:
    """The record of one queue entry of EVD ``evd``; a malformed one is a protocol error."""
    number = _NUMBERS.get(raw_number)
    if number is None:
        raise MalformedFrame(f"event number {raw_number:#x} is not a DAT event")
    notify = bool(flags & NOTIFIES)
    ep, status, cookie, length, aux = head
    if number == EventNumber.DTO_COMPLETION_EVENT or number == EventNumber.IB_DTO_EVENT:
        if dto_number(aux) != number:
            raise MalformedFrame(f"{number.name} of DTO {aux}")
        srq, body = srq_tail(flags, aux, body)
        immediate = 0
        if aux == Dtos.IB_RECV_IMMED:
            if len(body) != IMMEDIATE.size:
                raise MalformedFrame(f"a receive with immediate data has a {len(body)}-byte body")
            (immediate,) = IMMEDIATE.unpack(body)
        return number, DtoCompletion(evd, ep, cookie, status, length, aux, notify, immediate, srq)
    if number == EventNumber.RMR_BIND_COMPLETION_EVENT:
        return number, RmrBindCompletion(evd, ep, aux, cookie, status, notify)
    if number == EventNumber.SOFTWARE_EVENT:
        return number, SoftwareEvent(evd, cookie)
    fields = unpack(body)
    if not isinstance(fields, list):
        raise MalformedFrame(f"{number.name}: the body is not an array")
    try:
        return number, parse(record_for(number), [evd, *fields], number.name)
    except DatError as err:
        raise MalformedFrame(f"bad {number.name} {fields!r}: {err}") from None
