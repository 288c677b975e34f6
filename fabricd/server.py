"""The daemon's asyncio shell: the node (``Daemon``) with its unix sockets for consumers and the
operator, its TCP port for peer daemons, and its segment desk; the streams are fabricd/streams.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import random
import secrets
import socket
from collections.abc import Callable

from fabricd import sockdir
from fabricd.cma import CrossMemory
from fabricd.desk import Desk
from fabricd.local import local_pair
from fabricd.nic import Nic, PeerLink, Timer
from fabricd.shm import ShmMapper
from fabricd.streams import AdminStream, ConsumerStream, PeerStream
from fabricd.turn import Turn
from proto.frames import admin_socket, segment_desk
from proto.limits import Limits
from proto.peer_auth import NONCE_BYTES

log = logging.getLogger("fabricd")

WILDCARDS = ("", "0.0.0.0", "::")


def advertised(host: str) -> str:
    """The address a node listening on ``host`` gives (dat_ia_query, the peer HELLO). A wildcard
    names no host: then the address of this host's name (a container's own address on its
    network), unless that is a loopback (Debian's /etc/hosts gives 127.0.1.1), then the source
    address of the default route, else the loopback."""
    if host not in WILDCARDS:
        return host
    with contextlib.suppress(OSError):
        named = socket.gethostbyname(socket.gethostname())
        if not named.startswith("127."):
            return named
    with contextlib.suppress(OSError), socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect(("192.0.2.1", 9))  # TEST-NET-1; a UDP connect sends nothing
        return str(probe.getsockname()[0])
    return "127.0.0.1"


class Daemon:
    """One fabricd node: the NIC core plus its sockets (also the core's Shell)."""

    def __init__(
        self,
        name: str,
        host: str,
        port: int,
        socket_path: str,
        *,
        seed: int | None = None,
        coherent: bool = True,
        heartbeat: tuple[float, float] = (1.0, 3.0),
        advertise: str = "",
        socket_group: str | None = None,
        cluster_key: bytes | None = None,
        limits: Limits | None = None,
    ) -> None:
        self.name = name
        self.socket_group = socket_group
        self.host = host
        self.advertise = advertise or advertised(host)
        self.port = port
        self.socket_path = socket_path
        self.mapper = ShmMapper()
        self.turn = Turn()
        # the Shell's call_soon and call_idle are the turn's own (a call less on every look)
        self.call_soon: Callable[[Callable[[], None]], None] = self.turn.call_soon
        self.call_idle: Callable[[Callable[[], None]], None] = self.turn.call_idle
        self.now: Callable[[], float] = self._now  # the loop's own time() once it runs
        rng = random.Random(seed if seed is not None else int.from_bytes(os.urandom(8), "big"))
        self.nic = Nic(
            name,
            (self.advertise, port),
            self,
            self.mapper,
            lambda: rng.getrandbits(32),
            coherent,
            heartbeat,
            CrossMemory(),
            cluster_key,
            lambda: secrets.token_bytes(NONCE_BYTES),  # never from the seed: a nonce is a secret
            limits,
        )
        self._ticker: asyncio.TimerHandle | None = None
        self.desk: Desk | None = None
        self.nic.pid = os.getpid()
        self._servers: list[asyncio.AbstractServer] = []
        self._tasks: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Bind the peer port and the consumer socket."""
        loop = self._loop = asyncio.get_running_loop()
        self.now = loop.time  # busy polling asks per look: no frame of ours around it
        tcp = await loop.create_server(
            lambda: PeerStream(self.nic, self.turn),
            self.host,
            self.port,
            reuse_address=True,
            backlog=4096,
        )
        self.port = tcp.sockets[0].getsockname()[1]
        self.nic.address = (self.advertise, self.port)
        gid = sockdir.group_id(self.socket_group)
        sockdir.prepare(os.path.dirname(self.socket_path), gid)
        consumers = sockdir.listen(self.socket_path, sockdir.consumer_mode(gid), gid)
        admins = sockdir.listen(admin_socket(self.socket_path), sockdir.ADMIN_MODE, None)
        desk = sockdir.listen(segment_desk(self.socket_path), sockdir.consumer_mode(gid), gid)
        self.desk = Desk(self.nic, self.mapper, loop)
        self.desk.serve(desk)
        unix = await loop.create_unix_server(
            lambda: ConsumerStream(self.nic, self.turn), sock=consumers
        )
        admin = await loop.create_unix_server(lambda: AdminStream(self.nic, self.turn), sock=admins)
        self._servers = [tcp, unix, admin]
        self._tick()
        log.info(
            "fabricd %s: peers on %s:%d, consumers on %s",
            self.name,
            self.host,
            self.port,
            self.socket_path,
        )

    def _tick(self) -> None:
        assert self._loop is not None
        self.nic.tick(self._loop.time())
        self._ticker = self._loop.call_later(self.nic.heartbeat_interval, self._tick)

    async def close(self) -> None:
        """Stop listening, close every IA and peer stream, remove the consumer socket and
        unmap the consumers' memory."""
        self.nic.shutdown("the daemon is stopping")
        if self._ticker is not None:
            self._ticker.cancel()
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        if self.desk is not None:
            self.desk.close()
        for path in (self.socket_path, admin_socket(self.socket_path)):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(segment_desk(self.socket_path))
        self.mapper.close()

    # Shell
    def connect_peer(self, link: PeerLink, host: str, port: int) -> None:
        if self.is_self(host, port):
            assert self._loop is not None
            local_pair(self.nic, self._loop, link)
            return
        task = asyncio.get_running_loop().create_task(self._connect(link, host, port))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def is_self(self, host: str, port: int) -> bool:
        """Does (host, port) name this daemon? Then a connection takes the local path."""
        if port != self.port:
            return False
        return host == self.host or (
            self.host in ("0.0.0.0", "127.0.0.1", "::", "::1", "localhost")
            and host in ("127.0.0.1", "localhost", "::1", self.name)
        )

    async def _connect(self, link: PeerLink, host: str, port: int) -> None:
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(lambda: PeerStream(self.nic, self.turn, link), host, port)
        except OSError as err:
            self.nic.link_failed(link, f"{host}:{port}: {err}")

    def call_later(self, delay: float, fn: Callable[[], None]) -> Timer:
        assert self._loop is not None
        return self._loop.call_later(delay, self.turn.alone, fn)  # its frames leave with it

    def _now(self) -> float:
        assert self._loop is not None
        return self._loop.time()

    def crash(self) -> None:
        """Die at once, as a crashed node does: no goodbye to peers or consumers."""
        os._exit(137)

    def call_next(self, fn: Callable[[], None]) -> None:
        """Busy polling's next look, in the next loop iteration; first the CPU goes to a task
        queued for it (sched_yield: Linux's own busy polling stops when another task needs
        the CPU). Without it a consumer that shares the daemon's CPU sees its completions only
        when the looks end: `python -m bench.timeline --op send --size 64` showed 16 empty
        looks (~70 us) between the retire of a window and the consumer's has-events, then its
        doorbell; with it, one look, then the consumer posts the window and the next look
        takes it whole. `python -m bench.ab HEAD --rounds 6`: 64 B Sends at window 64 1.31 x
        moderated, 1.20 x signalled, 4 KiB Writes moderated 1.17 x; 64 B at window 1, median
        post to completion, Write 1.07 x and Read 0.97 x (ranges overlapping in every row)."""
        os.sched_yield()
        self.turn.call_next(fn)
