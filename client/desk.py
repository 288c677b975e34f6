"""The driver's side of the segment desk (docs/host-interface.md section 2): fetch a segment of
the daemon's as a descriptor, or hand over one of ours, on the Unix socket beside the daemon's
consumer socket. One short blocking request per connection, by SCM_RIGHTS."""

from __future__ import annotations

import socket

from proto.codec import Frame, FrameReader, encode
from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInsufficientResources, DatInvalidParameter, ProtocolError
from proto.frames import FrameType, segment_desk

TIMEOUT = 10.0  # seconds for one request


class Desk:
    """Requests of one IA (named ``ia`` in its HELLO) to the desk of the daemon at ``path``."""

    def __init__(self, consumer_socket: str, ia: str) -> None:
        self.path = segment_desk(consumer_socket)
        self.ia = ia

    def fetch(self, segment: str) -> int:
        """A descriptor of the daemon's segment ``segment`` (the caller closes it)."""
        reply, fds = self._ask(encode(FrameType.SEGMENT_GET, self.ia, segment), [])
        if len(fds) != 1:
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"no descriptor for {segment}: {reply}")
        return fds[0]

    def hand_over(self, fd: int, size: int) -> str:
        """Give the daemon our memfd ``fd`` of ``size`` bytes; returns its segment name."""
        reply, _ = self._ask(encode(FrameType.SEGMENT_PUT, self.ia, size), [fd])
        name = reply.fields[0]
        if not isinstance(name, str):
            raise DatInvalidParameter(Sub.INVALID_ARG1, f"segment desk: no name in {reply}")
        return name

    def _ask(self, request: bytes, fds: list[int]) -> tuple[Frame, list[int]]:
        got: list[int] = []
        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
                s.settimeout(TIMEOUT)
                s.connect(self.path)
                socket.send_fds(s, [request], fds)
                reader = FrameReader()
                while (frame := reader.next_event()) is None:
                    data, more, _, _ = socket.recv_fds(s, 4096, 1)
                    got.extend(more)
                    if not data:
                        raise ProtocolError("the desk closed before it answered")
                    reader.feed(data)
        except (OSError, ProtocolError) as err:
            for fd in got:  # a descriptor that came before the failure is not kept
                socket.close(fd)
            raise DatInsufficientResources(Sub.RESOURCE_MEMORY, f"segment desk: {err}") from None
        if frame.type != FrameType.SEGMENT:
            for fd in got:
                socket.close(fd)
            why = f"segment desk: {frame.fields[0]}"
            if "DAT_INSUFFICIENT_RESOURCES" in why:  # one of the daemon's limits
                raise DatInsufficientResources(Sub.RESOURCE_MEMORY, why)
            raise DatInvalidParameter(Sub.INVALID_ARG1, why)
        return frame, got
