"""The daemon's streams: a framed asyncio stream per consumer IA, admin connection and peer link.

Every byte read goes through a FrameReader; the NIC core decides what each frame means. A
malformed frame or any error raised while handling it closes that one connection with a logged
reason: nothing a consumer or peer sends can stop the daemon.
"""

from __future__ import annotations

import asyncio
import ctypes
import ctypes.util
import logging
import os
import socket
from collections.abc import Callable, Sequence
from typing import Final, cast

from fabricd.nic import Consumer, Nic, PeerLink
from fabricd.sockdir import peer_pid
from fabricd.turn import Turn
from proto.batch import MAX_BATCH_BYTES
from proto.codec import Frame, FrameReader, Sink, encode
from proto.errors import ProtocolError
from proto.frames import ROLE_ADMIN, FrameType

log = logging.getLogger("fabricd")
_os_write: Final = os.write  # (a C static compiled: nic/initiator.py's constants say why)
CLOSE_GRACE: Final = 2.0  # seconds a half-closed stream waits for the peer's end before an abort
JOIN_LIMIT: Final = 64 * 1024  # a turn's frames up to this size leave copied into one buffer
READ_AHEAD: Final = 2 * MAX_BATCH_BYTES
"""What a stream's FrameReader buffer grows to: room for a whole WRITES batch of small Writes
(MAX_BATCH_BYTES and its header), which then lands from one read. At 256 KiB, a window of 64
4 KiB Writes (263,188 bytes on the wire) took two reads and two loop iterations at the target
(`python -m bench.timeline --rows 400`, from each T "reads" of a batch to its "writes 13 B":
106.5 -> 95.4 us, the median of 22 and 24 windows);
`python -m bench.ab HEAD --rounds 4`: 4 KiB Writes at window 64, moderated, 1.07 x, 4 KiB
Sends 1.08 x, 64 B Writes 1.06 x, 1 MiB Writes 1.15 x (both sides' runs from 1.9 to 5.1 GB/s):
the ranges overlap in every row."""
_SCRATCH = memoryview(bytearray(64 * 1024))
TRIM_AFTER = 1000  # an IA that held this many objects: give the freed heap back to the system
_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")


def _trim() -> None:
    """malloc_trim(0): glibc keeps freed memory for reuse; a closed large IA's is returned."""
    trim = getattr(_LIBC, "malloc_trim", None)
    if trim is not None:
        trim(0)


class _Stream(asyncio.BufferedProtocol):
    """A framed stream: feeds the reader, hands frames to ``_frame``, and is a core Channel."""

    kind = "stream"

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.transport: asyncio.Transport | None = None
        self.reader = FrameReader(self._sink, max_bufsize=READ_AHEAD)
        self._peer = "?"
        self._pid = 0
        self._closed = False  # no more frames are handled
        self._draining = False  # half-closed: input is read and dropped until the peer closes
        self._lost_reported = False
        self._out: list[bytes | memoryview] = []  # corked: goes out in one write per loop turn
        self._fd = -1  # the socket's, written to directly while the transport holds nothing
        # bound once, not at each frame or read (compiled, ``self._flush`` as a value is an
        # attribute look-up making a bound method: nic/initiator.py's constants say more)
        self._flusher: Callable[[], None] = self._flush

    # Channel
    @property
    def peer_address(self) -> str:
        return self._peer

    @property
    def peer_pid(self) -> int:
        return self._pid

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        """Queue a frame; every frame queued in one loop turn leaves in one writev.

        Payload views stay views of registered memory until the flush: the DTO they belong to
        completes only when the peer acknowledges it, so the bytes are still the consumer's.
        """
        t = self.transport
        if t is None or t.is_closing() or self._draining:
            return  # (half-closed: a write after write_eof raises)
        out = self._out
        first = not out
        out.append(header)
        if payload:
            out.extend(payload)
        if first:
            self.turn.cork(self._flusher)

    def _flush(self) -> None:
        out, self._out = self._out, []
        t = self.transport
        if not out or t is None or t.is_closing():
            return
        if len(out) == 1:
            self._write(t, out[0])
        elif sum(map(len, out)) <= JOIN_LIMIT:
            self._write(t, b"".join(out))  # one buffer: cheaper for the loop than many small ones
        else:
            t.writelines(out)  # large payloads leave from registered memory, uncopied

    def _write(self, t: asyncio.Transport, data: bytes | memoryview) -> None:
        """One buffer to the socket: straight into it while the transport holds nothing
        unsent (uvloop's write path is skipped; order is kept), the rest through the
        transport, which also meets any error the socket has and closes as it does.
        Window-1 64 B Writes 66-68 -> 64-65 us, Reads 72-75 -> 69-72 (`fabricctl bench
        --mode lat`, four interleaved pairs); 64 B and 4 KiB Writes at window 64 unchanged."""
        fd = self._fd
        if fd >= 0 and not t.get_write_buffer_size():
            try:
                sent = _os_write(fd, data)
            except OSError:  # EAGAIN, or the socket's error: the transport's write sees it
                sent = 0
            if sent == len(data):
                return
            data = memoryview(data)[sent:]
        t.write(data)

    def close(self, reason: str) -> None:
        """Half-close: what was sent still arrives (a RST could destroy it), input is dropped."""
        t = self.transport
        if t is None or t.is_closing() or self._draining:
            return
        log.info("closing %s %s: %s", self.kind, self._peer, reason)
        self._flush()
        self._closed = self._draining = True
        if t.can_write_eof():
            t.write_eof()
            asyncio.get_running_loop().call_later(CLOSE_GRACE, t.abort)
        else:
            t.close()

    # asyncio.BufferedProtocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's are not subclasses
        sock = transport.get_extra_info("socket")
        self._fd = sock.fileno() if sock is not None else -1
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        elif sock is not None and sock.family == socket.AF_UNIX:
            self._pid = peer_pid(sock)  # the kernel's word, not the consumer's
        peer = transport.get_extra_info("peername")
        self._peer = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else "local"

    def get_buffer(self, sizehint: int) -> memoryview:
        if self._draining:
            return _SCRATCH
        return self.reader.get_buffer(sizehint)

    def buffer_updated(self, nbytes: int) -> None:
        if self._draining:
            return
        reader = self.reader
        reader.buffer_updated(nbytes)
        self.turn.read()
        if reader.landing:  # a large payload on its way: nothing to handle until it is whole
            self._batch_end()
            return
        try:
            if self._answered(reader):
                return
        except Exception as err:
            self._refused(err)
            return
        self.turn.begin()
        bulk = False
        try:
            self._head(reader)
            while not self._closed:
                frame = reader.next_event()
                if frame is None:
                    break
                bulk = bulk or frame.payload_len >= JOIN_LIMIT
                self._frame(frame)
            self._batch_end()
        except Exception as err:
            self._refused(err)
        finally:
            self.turn.end(later=bulk)

    def _refused(self, err: Exception) -> None:
        """What handling a read raised closes the connection (called in its except clause)."""
        if isinstance(err, ProtocolError):
            self._fail(f"protocol error: {err}")
        else:  # a bad field deep in a handler must not take the daemon down
            log.exception("error handling a frame from %s %s", self.kind, self._peer)
            self._fail(f"bad frame: {err!r}")

    def _answered(self, reader: FrameReader) -> bool:
        """Before the read's batch (a peer stream's Write lane): True if that handled and
        answered the whole read."""
        return False

    def _head(self, reader: FrameReader) -> None:
        """Before the read's frames are decoded one by one, in its batch (a peer stream's
        ACK lane)."""

    def _fail(self, reason: str) -> None:
        log.warning("%s %s: %s; closing the connection", self.kind, self._peer, reason)
        self.send(encode(FrameType.ERROR, reason))
        self.close(reason)
        self._report_lost(reason)

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        was_closed, self._closed = self._closed, True
        reason = f"connection lost ({exc!r})" if exc else "end of stream"
        if not was_closed and self.reader.pending:
            reason = f"truncated frame: stream ended {self.reader.pending} bytes into a frame"
            log.warning("%s %s: %s", self.kind, self._peer, reason)
        self._report_lost(reason)

    def _report_lost(self, reason: str) -> None:
        if not self._lost_reported:
            self._lost_reported = True
            self._lost(reason)

    # per kind
    def _sink(self, frame: Frame) -> Sink:
        return None

    def _frame(self, frame: Frame) -> None:
        raise NotImplementedError

    def _batch_end(self) -> None:
        pass

    def _lost(self, reason: str) -> None:
        pass


class ConsumerStream(_Stream):
    """A consumer process (one IA) on the daemon's unix socket."""

    kind = "consumer"

    def __init__(self, nic: Nic, turn: Turn) -> None:
        super().__init__(turn)
        self.nic = nic
        self.consumer: Consumer | None = None
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """A connection that says no HELLO within the heartbeat timeout is closed (it holds a
        descriptor and a buffer of the daemon's for nothing)."""
        super().connection_made(transport)
        wait = self.nic.links.timeout
        self._deadline = asyncio.get_running_loop().call_later(wait, self._no_hello, wait)

    def _no_hello(self, wait: float) -> None:
        if self.consumer is None and not self._closed:
            self._fail(f"no HELLO within {wait:g} s (the heartbeat timeout)")

    def _frame(self, frame: Frame) -> None:
        self.consumer = self.nic.consumer_frame(self, self.consumer, frame)
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def send(self, header: bytes, payload: Sequence[memoryview] = ()) -> None:
        """As any stream; but a consumer that leaves more than ``unread_bytes`` of what we sent
        unread is not reading its socket: its IA is closed (what it left is dropped)."""
        t = self.transport
        if t is not None and not t.is_closing():
            backlog = t.get_write_buffer_size()
            if backlog > self.nic.limits.unread_bytes:
                log.warning(
                    "consumer %s left %d bytes unread (--limit unread_bytes); closing its IA",
                    self.consumer.name if self.consumer else "?",
                    backlog,
                )
                t.abort()
                return
        super().send(header, payload)

    def _lost(self, reason: str) -> None:
        if self.consumer is not None:
            objects = len(self.consumer.eps) + len(self.consumer.lmrs) + len(self.consumer.evds)
            self.nic.consumer_lost(self.consumer)
            if objects >= TRIM_AFTER:
                _trim()
            self.consumer = None


class AdminStream(ConsumerStream):
    """An admin connection (fabricctl, client.faults) on the daemon's admin socket."""

    kind = "admin"

    def _frame(self, frame: Frame) -> None:
        self.consumer = self.nic.consumer_frame(self, self.consumer, frame, ROLE_ADMIN)


class PeerStream(_Stream):
    """A TCP stream to or from another daemon, carrying one connected endpoint pair."""

    kind = "peer"

    def __init__(self, nic: Nic, turn: Turn, link: PeerLink | None = None) -> None:
        super().__init__(turn)
        self.nic = nic
        self.link = link
        self._landing: Callable[[], None] = self._before_landing  # (bound once: as _flusher)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.link is None:
            self.link = self.nic.peer_accepted(self)
        else:
            self.nic.link_up(self.link, self)

    def _sink(self, frame: Frame) -> Sink:
        """Where a payload lands. Frames we queued before it leave first: a READ_RESP queued
        a moment ago still views the memory this payload may overwrite, and RC executes the
        read before the later write (the kernel copies what it is given)."""
        assert self.link is not None
        if self._out:
            self._flush()
        return self.nic.peer_sink(self.link, frame)

    def _answered(self, reader: FrameReader) -> bool:
        """The target's lane first (lone Writes landed); a read that was nothing else is
        answered at once outside any batch, when none was left for later: its cumulative ACK
        (``Nic.peer_batch_end``) leaves as it is sent. A window-1 Write's target then runs
        28 Python calls instead of 33 (cProfile)."""
        link = self.link
        if link is None or not self.nic.peer_answer(link, reader, self._landing):
            return False
        if not self.turn.idle:
            return False  # the long way, after the work left for this iteration
        self.nic.peer_batch_end(link)
        return True

    def _head(self, reader: FrameReader) -> None:
        if self.link is not None:
            self.nic.peer_lane(self.link, reader)

    def _before_landing(self) -> None:
        if self._out:  # as in _sink
            self._flush()

    def _frame(self, frame: Frame) -> None:
        assert self.link is not None
        self.nic.peer_frame(self.link, frame)

    def _batch_end(self) -> None:
        if self.link is not None:
            self.nic.peer_batch_end(self.link)

    def _lost(self, reason: str) -> None:
        if self.link is not None:
            self.nic.link_lost(self.link, reason)
