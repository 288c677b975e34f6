"""The segment desk: drivers fetch the daemon's segments and hand over their own as descriptors
(SCM_RIGHTS), on a Unix socket beside the consumer socket (docs/host-interface.md section 2).

One request per connection. SEGMENT_GET(ia, segment) is answered SEGMENT(segment, size) with the
segment's memfd attached; SEGMENT_PUT(ia, size), carrying one memfd, is answered SEGMENT(name,
size) once the daemon sealed and mapped it under that name. A request the caller may not make,
or anything else, is answered ERROR(reason). The caller is the process the kernel names
(SO_PEERCRED), and must hold the open IA it names: a segment is never handed to another process.
The stream sockets of the consumer plane cannot carry descriptors (the event loop's transports
read without ancillary data), hence a socket of its own, served here without a transport.
"""

from __future__ import annotations

import array
import asyncio
import logging
import os
import socket
from dataclasses import dataclass, field

from fabricd.nic import Consumer, Nic
from fabricd.shm import BadSegment, ShmMapper
from fabricd.sockdir import peer_pid
from proto.codec import Frame, FrameReader, encode
from proto.errors import ProtocolError
from proto.frames import FrameType

log = logging.getLogger("fabricd")
MAX_REQUEST = 4096  # bytes of one request frame
MAX_FDS = 4  # descriptors read with one request (more: refused, all closed)
DEADLINE = 5.0  # seconds a connection may take to send its request


class Refused(Exception):
    """The request is answered ERROR with this reason."""


@dataclass(eq=False)
class _Request:
    conn: socket.socket
    pid: int
    reader: FrameReader = field(default_factory=FrameReader)
    fds: list[int] = field(default_factory=list)
    timer: asyncio.TimerHandle | None = None


class Desk:
    """The segment desk of one daemon."""

    def __init__(self, nic: Nic, mapper: ShmMapper, loop: asyncio.AbstractEventLoop) -> None:
        self.nic, self.mapper, self.loop = nic, mapper, loop
        self.sock: socket.socket | None = None
        self._open: set[_Request] = set()

    def serve(self, sock: socket.socket) -> None:
        """Take requests on ``sock`` (listening)."""
        sock.setblocking(False)
        self.sock = sock
        self.loop.add_reader(sock.fileno(), self._accept)

    def close(self) -> None:
        """Stop serving; requests under way are dropped."""
        if self.sock is not None:
            self.loop.remove_reader(self.sock.fileno())
            self.sock.close()
            self.sock = None
        for req in list(self._open):
            self._finish(req)

    def _accept(self) -> None:
        assert self.sock is not None
        while True:
            try:
                conn, _ = self.sock.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as err:  # out of descriptors: the next readable tries again
                log.warning("segment desk: accept failed: %s", err)
                return
            conn.setblocking(False)
            req = _Request(conn, peer_pid(conn))
            self._open.add(req)
            req.timer = self.loop.call_later(DEADLINE, self._finish, req)
            self.loop.add_reader(conn.fileno(), self._readable, req)

    def _readable(self, req: _Request) -> None:
        try:
            data, ancillary, flags, _ = req.conn.recvmsg(
                MAX_REQUEST, socket.CMSG_SPACE(MAX_FDS * 4)
            )
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            self._finish(req)
            return
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds = array.array("i")
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
                req.fds.extend(fds)
        if not data:
            self._finish(req)
            return
        try:
            if flags & socket.MSG_CTRUNC:
                raise Refused(f"more than {MAX_FDS} descriptors")
            req.reader.feed(data)
            frame = req.reader.next_event()
            if frame is None:
                if req.reader.pending > MAX_REQUEST:
                    raise Refused("a request is one small frame")
                return
            reply, fd = self._answer(req, frame)
        except (Refused, ProtocolError) as err:
            log.warning("segment desk: process %d: %s", req.pid, err)
            reply, fd = encode(FrameType.ERROR, str(err)), None
        self._reply(req, reply, fd)
        self._finish(req)

    def _answer(self, req: _Request, frame: Frame) -> tuple[bytes, int | None]:
        if frame.type == FrameType.SEGMENT_GET:
            ia, segment = frame.fields
            consumer = self._consumer(ia, req.pid)
            if not self.nic.regs.may_fetch(consumer, segment):
                raise Refused(f"{segment!r} is not a segment of IA {ia!r}")
            assert isinstance(segment, str)
            fd = self.mapper.descriptor(segment)
            return encode(FrameType.SEGMENT, segment, os.fstat(fd).st_size), fd
        if frame.type == FrameType.SEGMENT_PUT:
            ia, size = frame.fields
            consumer = self._consumer(ia, req.pid)
            if len(req.fds) != 1 or type(size) is not int:
                raise Refused("SEGMENT_PUT carries one memfd and its size")
            if consumer.handed_bytes + size > self.nic.limits.ia_bytes:
                raise Refused(
                    f"DAT_INSUFFICIENT_RESOURCES: IA {ia!r} would hand over more than "
                    f"{self.nic.limits.ia_bytes} bytes (--limit ia_bytes)"
                )
            name = self.nic.regs.handed_name(consumer)
            try:
                self.mapper.attach(name, req.fds.pop(), size)
            except (BadSegment, OSError) as err:
                raise Refused(f"the memfd cannot be a segment: {err}") from None
            self.nic.memory.adopt(name, consumer.id)
            consumer.handed_bytes += size
            return encode(FrameType.SEGMENT, name, size), None
        raise Refused(f"{frame.type.name} is no segment desk request")

    def _consumer(self, ia: object, pid: int) -> Consumer:
        try:
            return self.nic.desk_consumer(ia, pid)
        except PermissionError as err:
            raise Refused(str(err)) from None

    def _reply(self, req: _Request, reply: bytes, fd: int | None) -> None:
        rights = []
        if fd is not None:
            rights.append((socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", [fd])))
        try:
            req.conn.sendmsg([reply], rights)
        except OSError as err:  # the caller left, or let its socket fill: its loss
            log.info("segment desk: process %d: reply not sent: %s", req.pid, err)

    def _finish(self, req: _Request) -> None:
        if req not in self._open:
            return
        self._open.discard(req)
        if req.timer is not None:
            req.timer.cancel()
        self.loop.remove_reader(req.conn.fileno())
        req.conn.close()
        for fd in req.fds:  # descriptors sent with a refused request are not kept
            os.close(fd)
