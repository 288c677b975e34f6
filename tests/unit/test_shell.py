"""The daemon's shell: busy polling's next look gives the CPU away first (a consumer that
shares it can post), then runs in a later loop iteration, not in this one; it and a timer's
callback are batches of their own (fabricd.turn): what they cork leaves when they return."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest
import uvloop

from fabricd.server import Daemon
from fabricd.streams import PeerStream


def test_the_next_look_yields_the_cpu_then_runs_in_a_later_iteration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    said: list[str] = []
    monkeypatch.setattr(os, "sched_yield", lambda: said.append("yield"))
    daemon = Daemon("shell", "127.0.0.1", 0, str(tmp_path / "d.sock"))

    async def main() -> None:
        daemon._loop = asyncio.get_running_loop()
        daemon.call_next(lambda: said.append("look"))
        said.append("this iteration")
        await asyncio.sleep(0)
        await asyncio.sleep(0)

    asyncio.run(main())
    assert said == ["yield", "this iteration", "look"]


def test_uvloop_counts_timers_and_its_clock_in_whole_milliseconds() -> None:
    """What fabricd/nic/intake.py's LINGER and BUSY_LOOKS say of the daemon's loop: a delay of
    200 us (LINGER) rounds to no delay (it runs at the next iteration, before a call_soon
    made after it), and loop.time() moves in whole milliseconds. (No real timer is set
    beside it: whether one of 1 ms has come due by the next iteration depends on the
    machine's load.)"""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        ran: list[str] = []
        loop.call_later(200e-6, lambda: ran.append("200 us"))
        loop.call_soon(lambda: ran.append("soon"))
        await asyncio.sleep(0)
        assert ran == ["200 us", "soon"]
        for _ in range(20):
            ms = loop.time() * 1000
            assert abs(ms - round(ms)) < 1e-6
            await asyncio.sleep(0)

    uvloop.run(main())


def test_a_timer_is_a_batch_of_its_own(tmp_path: Path) -> None:
    said: list[str] = []
    daemon = Daemon("shell", "127.0.0.1", 0, str(tmp_path / "d.sock"))

    def fire() -> None:
        asyncio.get_running_loop().call_soon(lambda: said.append("the loop's next"))
        daemon.turn.cork(lambda: said.append("flush"))
        said.append("timer")

    async def main() -> None:
        daemon._loop = asyncio.get_running_loop()
        daemon.call_later(0, fire)
        await asyncio.sleep(0.01)
        said.append("later")

    asyncio.run(main())
    assert said == ["timer", "flush", "the loop's next", "later"]


def test_a_half_closed_stream_sends_nothing_more(tmp_path: Path) -> None:
    """_Stream.close half-closes (write_eof): a frame queued after it is dropped, not written
    after the EOF (uvloop raises RuntimeError for that), and what came before arrives."""
    daemon = Daemon("shell", "127.0.0.1", 0, str(tmp_path / "d.sock"))
    ours, theirs = socket.socketpair()

    async def main() -> bytes:
        loop = asyncio.get_running_loop()
        stream = PeerStream(daemon.nic, daemon.turn)
        await loop.connect_accepted_socket(lambda: stream, ours)
        stream.send(b"before")
        stream.close("test")
        stream.send(b"after")
        theirs.setblocking(False)
        got = b""
        while chunk := await loop.sock_recv(theirs, 64):
            got += chunk
        return got

    try:
        assert uvloop.run(main()) == b"before"
    finally:
        theirs.close()


def test_frames_written_straight_to_a_full_socket_keep_their_order(tmp_path: Path) -> None:
    """_Stream._write: a turn's frames go straight into the socket while the transport holds
    nothing unsent; once the socket took only part of one, the transport holds the rest and
    every later frame queues behind it, even when the socket has room again before the
    transport wrote: the peer reads every byte once, in order."""
    daemon = Daemon("shell", "127.0.0.1", 0, str(tmp_path / "d.sock"))
    ours, theirs = socket.socketpair()
    ours.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    frames = [bytes([i]) * (1000 + 997 * i) for i in range(40)]  # ~820 KB: the socket fills

    async def main() -> tuple[bytes, int]:
        loop = asyncio.get_running_loop()
        stream = PeerStream(daemon.nic, daemon.turn)
        transport, _ = await loop.connect_accepted_socket(lambda: stream, ours)
        for frame in frames[:30]:
            stream.send(frame)  # outside any batch: each leaves at once
        queued = transport.get_write_buffer_size()
        got = theirs.recv(1 << 16)  # room in the socket before the transport's next write
        for frame in frames[30:]:
            stream.send(frame)
        theirs.setblocking(False)
        while len(got) < sum(map(len, frames)):
            got += await loop.sock_recv(theirs, 1 << 16)
        transport.close()
        return got, queued

    try:
        got, queued = uvloop.run(main())
    finally:
        theirs.close()
    assert queued > 0, "the socket filled: the transport held the rest"
    assert got == b"".join(frames)
