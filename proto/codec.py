"""Framing and the msgpack codec, without I/O.

A frame is a 4-byte big-endian header length, the msgpack header ``[type, payload_len, *fields]``
and then ``payload_len`` raw bytes. Payload never passes through msgpack: the reader asks its owner
where the payload of each header should land (``sink_for``) and, for large payloads, hands the
destination buffer itself to the kernel (the asyncio.BufferedProtocol contract), so RDMA data goes
from the socket straight into the target's shared memory.
"""

from __future__ import annotations

import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import msgpack

from proto import _pack
from proto import _scatter as scatter
from proto.errors import FrameTooLarge, MalformedFrame
from proto.frames import (
    FIELDS,
    MAX_HEADER_LEN,
    MAX_PAYLOAD_LEN,
    MAX_PROTOCOL_VERSION,
    MIN_PROTOCOL_VERSION,
    FrameType,
)

_LEN = struct.Struct(">I")
_KINDS: Final = {int(kind): kind for kind in FrameType}
"""Frame types by number: a dict lookup, where FrameType(n) is two Python calls a frame."""
_packer = msgpack.Packer(use_bin_type=True)

DIRECT_LANDING_MIN: Final = 32 * 1024
"""A sink's segment (the rest of it) this large is written by the kernel straight into its
memory, one read each; smaller ones (a batch of small Writes: a segment each) come through the
buffer, many in one read, and are copied out."""
PEEK_AFTER: Final = 512 * 1024
PEEK: Final = 4096
"""After a payload of PEEK_AFTER bytes or more, the next read is offered PEEK bytes: the next
frame's header brings at most that much of its own payload through the buffer (one more read,
against a copy of up to a buffer's worth: 1 MiB RDMA Read and 512 KiB Read and Write +3-5 %)."""


@dataclass(slots=True)
class Frame:
    """One decoded frame: its type, header fields, and the payload when it was collected."""

    type: FrameType
    fields: list[Any]
    payload_len: int = 0
    # bytearray: collected by the reader and handed over; memoryview: part of another's
    payload: bytes | bytearray | memoryview | None = field(default=None)


Sink = Sequence[memoryview] | None
"""Where a payload lands: views adding up to payload_len, () to discard, None to collect."""

DISCARD: Final[Sequence[memoryview]] = ()


def encode(ftype: FrameType, *fields: Any, payload_len: int = 0) -> bytes:
    """Encode one header (the payload, if any, is written after it by the caller)."""
    header: bytes = _packer.pack([ftype, payload_len, *fields])
    return _LEN.pack(len(header)) + header


encode_ints: Final = _pack.ints
"""``encode_ints(ftype, payload_len, *fields)``: ``encode`` of a header whose items are all
unsigned ints (an ACK, WRITE, READ_REQ, READ_RESP: the data path's), the same bytes packed in
C by msgpack-c (proto/_pack.c): an ACK's header ~1.8 -> ~0.6 us in the target's daemon (its
cache cold, timestamps around the call in a window-1 run)."""
encode_framed: Final = _pack.framed
"""``encode_framed(payload, ftype, *fields)``: ``encode_ints(ftype, len(payload), *fields)``
and the payload after it, one bytes object (a small request's whole frame)."""


def pack(obj: Any) -> bytes:
    """One msgpack object (an event's body in its queue entry)."""
    data: bytes = _packer.pack(obj)
    return data


def unpack(raw: bytes | memoryview) -> Any:
    """One msgpack object; anything else is a MalformedFrame."""
    try:
        return msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises many kinds on garbage
        raise MalformedFrame(f"not msgpack: {exc!r}") from None


def hello(role: str, name: str) -> bytes:
    """The HELLO every connection starts with: the version range this side accepts."""
    return encode(FrameType.HELLO, MIN_PROTOCOL_VERSION, MAX_PROTOCOL_VERSION, role, name)


def encode_frame(ftype: FrameType, *fields: Any, payload: bytes = b"") -> bytes:
    """Encode header and payload into one bytes object (control frames, tests)."""
    return encode(ftype, *fields, payload_len=len(payload)) + payload


def decode_header(raw: bytes | memoryview, max_payload: int = MAX_PAYLOAD_LEN) -> Frame:
    """Decode and validate one msgpack header (without its 4-byte length prefix)."""
    try:
        obj = msgpack.unpackb(raw, raw=False, use_list=True, strict_map_key=True)
    except Exception as exc:  # msgpack raises many kinds on garbage
        raise MalformedFrame(f"header is not msgpack: {exc!r}") from None
    if not isinstance(obj, list) or len(obj) < 2:
        raise MalformedFrame("header is not an array [type, payload_len, ...]")
    ftype, plen = obj[0], obj[1]
    if type(ftype) is not int or type(plen) is not int:
        raise MalformedFrame("frame type and payload length must be integers")
    kind = _KINDS.get(ftype)
    if kind is None:
        raise MalformedFrame(f"unknown frame type {ftype:#x}")
    fields = obj[2:]
    if len(fields) != len(FIELDS[kind]):
        raise MalformedFrame(f"{kind.name} has {len(fields)} fields, expected {len(FIELDS[kind])}")
    if plen < 0 or plen > max_payload:
        raise FrameTooLarge(f"payload length {plen} outside 0..{max_payload}")
    return Frame(kind, fields, plen)


def _collect(_: Frame) -> Sink:
    return None


class FrameReader:
    """Incremental decoder shaped like asyncio.BufferedProtocol: get_buffer / buffer_updated.

    ``sink_for(frame)`` is called once per header with a payload and returns where it lands.
    Decoded frames are taken with :meth:`next_event`; a malformed stream raises ProtocolError
    and the reader must then be dropped with its connection.
    """

    def __init__(
        self,
        sink_for: Callable[[Frame], Sink] = _collect,
        *,
        max_header: int = MAX_HEADER_LEN,
        max_payload: int = MAX_PAYLOAD_LEN,
        bufsize: int = 16 * 1024,
        max_bufsize: int = 256 * 1024,
    ) -> None:
        self._sink_for = sink_for
        self._max_header = max_header
        self._max_payload = max_payload
        self._max_bufsize = max_bufsize
        self._want_more = False  # the last read filled all the room: a busy stream
        self._offered = 0
        self._buf = bytearray(max(bufsize, 256))
        self._view = memoryview(self._buf)
        self._start = 0
        self._end = 0
        self._peek = False  # the last frame brought a payload of PEEK_AFTER bytes or more
        # payload in progress
        self._frame: Frame | None = None
        self._views: list[memoryview] = []
        self._remaining = 0
        self._collect: bytearray | None = None
        self._direct = False

    # -- the BufferedProtocol half -------------------------------------------------------------

    def get_buffer(self, sizehint: int = -1) -> memoryview:
        """Return the buffer the next bytes from the stream should be written into."""
        if self._frame is not None and self._start == self._end:
            if self._views and len(self._views[0]) >= DIRECT_LANDING_MIN:
                self._direct = True
                return self._views[0]  # (the views hold exactly the payload: sink_for's check)
            if self._remaining >= DIRECT_LANDING_MIN and self._collect is not None:
                self._direct = True
                done = len(self._collect) - self._remaining
                return memoryview(self._collect)[done:]
        self._direct = False
        if self._want_more and self._start == self._end and len(self._buf) < self._max_bufsize:
            self._start = self._end = 0  # empty: a bigger buffer costs no copy
            self._want_more = False
            self._grow()
        if self._end == len(self._buf):
            self._compact()
            if self._end == len(self._buf):  # full of undecoded frames (a large header): grow
                self._grow()
        self._offered = len(self._buf) - self._end
        if self._peek and self._offered > PEEK:
            self._peek = False
            self._offered = -1  # a full peek says nothing of the stream's pace
            return self._view[self._end : self._end + PEEK]
        return self._view[self._end :]

    def buffer_updated(self, nbytes: int) -> None:
        """Account for ``nbytes`` written into the last buffer returned by get_buffer."""
        if self._direct:
            self._direct = False
            self._advance_payload(nbytes)
        else:
            self._want_more = nbytes == self._offered
            self._end += nbytes

    def feed(self, data: bytes | memoryview) -> None:
        """Copy ``data`` in (for streams that are not read into get_buffer's buffer)."""
        mv = memoryview(data)
        while mv:
            buf = self.get_buffer(len(mv))
            n = min(len(buf), len(mv))
            buf[:n] = mv[:n]
            self.buffer_updated(n)
            mv = mv[n:]

    @property
    def view(self) -> memoryview:
        """The buffer the bytes are read into (``head`` says which of them a lane may take)."""
        return self._view

    def head(self) -> tuple[int, int]:
        """Where the buffered bytes a lane may take whole frames from start and end in
        ``view``: none (an empty range) while a frame is in progress. The lane then says where
        it stopped (``took``); what it left is decoded here as before."""
        if self._frame is not None:
            return 0, 0
        return self._start, self._end

    def took(self, stop: int) -> None:
        """A lane consumed the whole frames from ``head``'s start up to ``stop`` (a frame
        boundary)."""
        if not self._start <= stop <= self._end:
            raise ValueError(f"a lane stopped at {stop}, outside {self._start}..{self._end}")
        self._start = stop
        if stop == self._end:
            self._start = self._end = 0

    @property
    def landing(self) -> bool:
        """A payload is arriving and is not complete: the last bytes read were all its (no
        frame can be complete until more come)."""
        return self._remaining > 0 and self._start == self._end and self._frame is not None

    @property
    def drained(self) -> bool:
        """Every byte read so far was handled: no frame in progress (a payload that came whole
        into its place is not handled until ``next_event`` returns its frame), none buffered."""
        return self._frame is None and self._start == self._end

    @property
    def pending(self) -> int:
        """Bytes of an unfinished frame held or expected (non-zero at EOF: a truncated frame)."""
        return self._end - self._start + self._remaining

    # -- decoding ------------------------------------------------------------------------------

    def next_event(self) -> Frame | None:
        """Return the next complete frame, or None when more bytes are needed."""
        while True:
            if self._frame is not None:
                if not self._drain_into_payload():
                    return None
                return self._finish_payload()
            frame = self._parse_header()
            if frame is None:
                return None
            if frame.payload_len == 0:
                return frame
            self._begin_payload(frame)

    def _parse_header(self) -> Frame | None:
        avail = self._end - self._start
        if avail < 4:
            return None
        (hlen,) = _LEN.unpack_from(self._buf, self._start)
        if hlen == 0 or hlen > self._max_header:
            raise FrameTooLarge(f"header length {hlen} outside 1..{self._max_header}")
        if avail < 4 + hlen:
            return None
        begin = self._start + 4
        raw = self._view[begin : begin + hlen]
        self._start = begin + hlen
        return self._decode_header(raw)

    def _decode_header(self, raw: memoryview) -> Frame:
        return decode_header(raw, self._max_payload)

    def _begin_payload(self, frame: Frame) -> None:
        sink = self._sink_for(frame)
        self._frame = frame
        self._remaining = frame.payload_len
        if sink is None:
            self._collect = bytearray(frame.payload_len)
            self._views = []
        else:
            views, total = scatter.views(sink)  # bytes views, the empty ones dropped
            if sink and total != frame.payload_len:
                raise ValueError(f"sink holds {total} bytes for a {frame.payload_len}-byte payload")
            self._collect = None
            self._views = views

    def _drain_into_payload(self) -> bool:
        """Move buffered bytes into the payload in progress; True once it is complete."""
        take = min(self._remaining, self._end - self._start)
        if take:
            src = self._view[self._start : self._start + take]
            self._start += take
            if self._collect is not None:
                done = len(self._collect) - self._remaining
                self._collect[done : done + take] = src
                self._remaining -= take
            else:
                self._copy_into_views(src)
        if self._start == self._end:
            self._start = self._end = 0
        return self._remaining == 0

    def _copy_into_views(self, src: memoryview) -> None:
        """Fill the sink's views from ``src`` in order (a batch of small Writes: one view
        each; filled views leave the list)."""
        scatter.fill(self._views, src)
        self._remaining -= len(src)  # what filled the views, and bytes discarded (DISCARD sink)

    def _consume_views(self, n: int) -> None:
        self._remaining -= n
        head = self._views[0]
        if n == len(head):
            self._views.pop(0)
        else:
            self._views[0] = head[n:]

    def _advance_payload(self, nbytes: int) -> None:
        if self._collect is not None:
            self._remaining -= nbytes
        else:
            self._consume_views(nbytes)

    def _finish_payload(self) -> Frame:
        frame = self._frame
        assert frame is not None
        self._peek = frame.payload_len >= PEEK_AFTER
        if self._collect is not None:
            frame.payload = self._collect  # handed over, not copied: the reader lets go of it
        self._frame = None
        self._collect = None
        self._views = []
        return frame

    def _grow(self) -> None:
        bigger = bytearray(min(2 * len(self._buf), len(self._buf) + self._max_bufsize))
        bigger[: self._end] = self._buf[: self._end]
        self._buf, self._view = bigger, memoryview(bigger)

    def _compact(self) -> None:
        live = self._end - self._start
        self._buf[:live] = self._buf[self._start : self._end]
        self._start, self._end = 0, live
