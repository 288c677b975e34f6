"""The host interface's event queues: one ring per EVD that the daemon fills with every event
of that EVD, in the order it produced them (docs/host-interface.md section 6). Pure: no I/O."""

from __future__ import annotations

import struct
from typing import Final

from proto.hostif import CONSUMER_LINE, PRODUCER_LINE, SLOTS, Ring, RingError


class EqWord:
    """The words of an event queue beside its indices, as byte offsets from the ring's start
    (u32 each). The producer's line holds the daemon's, the consumer's line the driver's."""

    OVERFLOW: Final = PRODUCER_LINE + 4  # daemon: 1 once an event found the queue full (lost)
    NOTIFIED: Final = PRODUCER_LINE + 8  # daemon: the last ARM it answered with a NOTIFY frame
    ARM: Final = CONSUMER_LINE + 4  # driver: free-running; ARM != NOTIFIED asks for a NOTIFY
    WANT: Final = CONSUMER_LINE + 8  # driver: ...once at least WANT events are queued (threshold)


EQE: Final = struct.Struct("<IBBHIIQII")
"""An event queue entry's head, 32 bytes: event_number, flags (``NOTIFIES``), reserved (0),
body length, ep, status, cookie, length, aux; then ``body length`` bytes of msgpack.

DTO_COMPLETION: ep, status, cookie (user_cookie), length (transfered_length), aux (the Dtos).
RMR_BIND_COMPLETION: ep, status, cookie, aux (the RMR handle). SOFTWARE_EVENT: cookie (the
pointer value). Every other event: its record's fields after ``evd`` as a msgpack array."""
NOTIFIES: Final = 0x01
"""EQE flag: the event wakes a waiter (clear for an UNSIGNALLED completion)."""
SRQ_RECEIVE: Final = 0x02
"""EQE flag: a completion of a receive taken from a shared receive queue; the body ends with
the SRQ's handle (``SRQ_TAIL``), which the driver counts as reaped when it hands the event out
(the EP may be freed by then)."""
SRQ_TAIL: Final = struct.Struct("<I")
EQ_ENTRY_SIZE: Final = 512
EQE_BODY_MAX: Final = EQ_ENTRY_SIZE - EQE.size
EQE_SLOTS: Final = struct.Struct(EQE.format + f"{EQE_BODY_MAX}x")
"""A slot's header, the rest of the slot skipped: a driver reads a run of slots with one
iter_unpack."""


def eq_segment(ia_name: str, evd: int) -> str:
    """The shared-memory segment of EVD ``evd``'s event queue (the daemon creates it at
    dat_evd_create, named after the IA and the EVD handle)."""
    return f"datfabric-{ia_name}-eq{evd}"


def eq_ring(view: memoryview, entries: int, producer: bool) -> Ring:
    """An EVD's event queue, from one side."""
    return Ring(view, entries, EQ_ENTRY_SIZE, producer)


def write_eqe(
    ring: Ring,
    number: int,
    flags: int,
    fields: tuple[int, int, int, int, int],
    body: bytes = b"",
    ahead: int = 0,
) -> None:
    """Producer: fill the slot ``ahead`` places past the next one, which the caller checked
    is free (``fields``: ep, status, cookie, length, aux); the caller publishes."""
    if len(body) > EQE_BODY_MAX:
        raise ValueError(f"an event body of {len(body)} bytes does not fit an entry")
    at = ring.slot(ring.mine + ahead)
    EQE.pack_into(ring.view, at, number, flags, 0, len(body), *fields)
    if body:
        ring.view[at + EQE.size : at + EQE.size + len(body)] = body


_LENGTH_AT: Final = struct.calcsize(EQE.format[:-2])  # an entry's ``length``, its u32 field
_U32: Final = struct.Struct("<I")


def newest_length(ring: Ring) -> int:
    """Producer: the ``length`` of the newest entry it wrote (a DTO completion's transferred
    bytes; 0 for the events that carry none): that field alone (every window-1 retire asks:
    the whole head unpacked was ~1 us of each such Write's, perf)."""
    at = SLOTS + ((ring.mine - 1) & ring.mask) * ring.entry_size  # ring.slot, inline
    length: int = _U32.unpack_from(ring.view, at + _LENGTH_AT)[0]
    return length


def read_eqe(ring: Ring, index: int) -> tuple[int, int, tuple[int, int, int, int, int], memoryview]:
    """Consumer: the entry of ``index`` as (event_number, flags, (ep, status, cookie, length,
    aux), body); RingError if it is garbage."""
    at = ring.slot(index)
    number, flags, reserved, size, ep, status, cookie, length, aux = EQE.unpack_from(ring.view, at)
    if reserved or size > EQE_BODY_MAX:
        raise RingError(f"event {index}: reserved byte {reserved} or body length {size}")
    body = ring.view[at + EQE.size : at + EQE.size + size]
    return number, flags, (ep, status, cookie, length, aux), body
