"""The blocking DAT API: the IA (dat_ia_open) over one unix socket to its daemon; the objects it
hands out are in client/handles.py (and importable from here)."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import select
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

from client.cmcalls import ANY_QUALS
from client.common import HandleCalls
from client.core import Call, ClientCore, Event, Op, Triplet
from client.desk import Desk
from client.handle import Handle
from client.handles import Cno, Cr, Ep, Evd, Lmr, Psp, Pz, Rmr, Rsp
from client.shm import Arena, Buffer, QueueMaps
from client.srq_objects import Srq
from proto.attrs import EpAttr
from proto.codec import hello
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    DatReturnSubtype,
    EvdFlags,
    HandleType,
    PspFlags,
)
from proto.errors import (
    DatAbort,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatProviderNotFound,
    DatTimeoutExpired,
)
from proto.frames import ROLE_ADMIN, ROLE_CONSUMER
from proto.hostif import ASYNC_EVD

__all__ = ["Cno", "Cr", "Ep", "Evd", "Ia", "Lmr", "Psp", "Pz", "Rmr", "Rsp", "Srq", "socket_for"]

Sub = DatReturnSubtype
DEFAULT_SOCKET = "/tmp/datfabric/fabricd.sock"
DEFAULT_IA_NAME = "datfabric"
CLOSE_READS = 64  # reads dat_ia_close makes at most looking for a dead daemon's EOF


def socket_for(ia_name: str) -> str:
    """The daemon socket an IA name stands for: a path, or the default node's socket."""
    if "/" in ia_name:
        return ia_name
    if len(ia_name) >= 256:
        raise DatInvalidParameter(Sub.INVALID_ARG1, "IA name longer than DAT_NAME_MAX_LENGTH")
    env = os.environ.get(f"DATFABRIC_SOCKET_{ia_name.upper().replace('-', '_')}")
    return env or os.environ.get("DATFABRIC_SOCKET", DEFAULT_SOCKET)


class Ia(HandleCalls):
    """An open Interface Adapter: one consumer connection to the node's daemon (dat_ia_open)."""

    def __init__(
        self, name: str = DEFAULT_IA_NAME, async_evd_qlen: int = 8, *, admin: bool = False
    ) -> None:
        """``admin``: ``name`` is a daemon's admin socket (proto.frames.admin_socket), and the
        connection serves ClientCore.admin calls only (client.faults uses it)."""
        path = socket_for(name)
        self.name = name
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.desk = Desk(path, self.token)
        self.queues = QueueMaps(self.desk)
        self.core = ClientCore(self.token, self.queues, async_evd_qlen)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._poller = select.poll()  # poll(2): any descriptor number (select(2) stops at 1,024)
        self._poller.register(self.sock, select.POLLIN)
        try:
            self.sock.connect(path)
        except OSError as err:
            self.sock.close()
            raise DatProviderNotFound(Sub.NAME_NOT_REGISTERED, f"{name}: {path}: {err}") from None
        self.arena = Arena(self.desk)
        self.closed = False
        self._send(hello(ROLE_ADMIN if admin else ROLE_CONSUMER, self.token))
        deadline = time.monotonic() + 10.0
        while not self.core.ready:
            if self.core.catastrophic or time.monotonic() > deadline:
                self.close()
                raise self.core.open_failure(f"{name} ({path})")
            self._pump(1.0)
        self.async_evd = Evd(self, ASYNC_EVD)
        atexit.register(self.close)
        if not admin:
            self.run(self.core.async_evd_create())

    # -- transport -----------------------------------------------------------------------------

    def _send(self, data: bytes) -> None:
        if self.closed or self.core.catastrophic:
            raise DatAbort(message="the IA is closed or its daemon is gone")
        try:
            self.sock.sendall(data)
        except OSError as err:
            self.core.lost(str(err))
            raise DatAbort(message=f"daemon connection lost: {err}") from None

    def _readable(self, timeout: float | None) -> bool:
        """Has the daemon sent something (or hung up) within ``timeout`` seconds?"""
        return bool(self._poller.poll(None if timeout is None else timeout * 1000))

    def _pump(self, timeout: float | None) -> None:
        """Read whatever the daemon sent within ``timeout`` seconds (0: only what is there)."""
        if self.closed or self.core.catastrophic:
            return
        ready = self._readable(timeout)
        while ready:
            reader = self.core.reader
            buf = reader.get_buffer(-1)
            try:
                n = self.sock.recv_into(buf, len(buf), socket.MSG_DONTWAIT)
            except BlockingIOError:
                break
            except OSError as err:
                self.core.lost(str(err))
                return
            if n == 0:
                self.core.lost("the daemon closed the connection")
                return
            reader.buffer_updated(n)
            self.core.drain()
            if n < len(buf):
                break

    def kick(self) -> None:
        """Ring the doorbells ClientCore.kick asks for (before a wait, on an empty EVD)."""
        doorbells = self.core.kick()
        if doorbells and not self.closed and not self.core.catastrophic:
            with contextlib.suppress(DatAbort):
                self._send(doorbells)

    def _open(self) -> None:
        """Every call on a closed IA is DAT_INVALID_HANDLE."""
        if self.closed:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_IA, f"IA {self.name} is closed")

    def run(self, op: Op) -> Any:
        """Drive an operation of the core: send each call, wait for its reply."""
        self._open()
        try:
            call = next(op)
            while True:
                call = op.send(self._roundtrip(call))
        except StopIteration as stop:
            return stop.value

    def _roundtrip(self, call: Call) -> tuple[object, ...]:
        req_id, data = self.core.call_frame(call)
        self._send(data)
        while True:
            result = self.core.take_reply(req_id)
            if result is not None:
                return result
            if self.core.catastrophic:
                raise DatAbort(message="the daemon went away during the call")
            self._pump(None)

    # -- DAT calls -----------------------------------------------------------------------------

    def query(self) -> dict[str, Any]:
        """dat_ia_query."""
        result: dict[str, Any] = self.run(self.core.ia_query(self.name))
        return result

    def close(self, flags: int = CloseFlags.ABRUPT) -> None:
        """dat_ia_close: the daemon tears down every object of this IA."""
        if self.closed:
            return
        if flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {flags!r}")
        if flags == CloseFlags.GRACEFUL and (self.core.eps or self.core.lmrs):
            raise DatInvalidState(Sub.INVALID_STATE_IA_IN_USE, "the IA still has objects")
        # A daemon that died meanwhile shows now (IA_CATASTROPHIC): read up to its EOF, which
        # one _pump(0) misses behind frames still unread (a peer's events before the crash).
        for _ in range(CLOSE_READS):
            if self.core.catastrophic or not self._readable(0):
                break
            self._pump(0)
        self.closed = True
        atexit.unregister(self.close)
        self.sock.close()
        self.arena.close()
        self.queues.close()

    def alloc(self, size: int) -> Buffer:
        """Registrable memory from the IA's shared-memory arena."""
        return self.arena.alloc(size)

    def alloc_shared(self, cookie: bytes, size: int) -> Buffer:
        """Shared memory for a DAT_MEM_TYPE_SHARED_VIRTUAL LMR: every consumer of this node
        that names the same 40-byte cookie gets the same pages."""
        name, _ = self.run(self.core.shared_attach(cookie, size))
        return self.arena.map_shared(name, size)

    def mem_free(self, buf: Buffer) -> None:
        """Return memory from alloc."""
        self.arena.free(buf)

    def lmr_sync_rdma_read(self, local_segments: Sequence[Triplet]) -> None:
        """dat_lmr_sync_rdma_read: local writes become visible to incoming RDMA Reads."""
        self.run(self.core.lmr_sync(False, local_segments))

    def lmr_sync_rdma_write(self, local_segments: Sequence[Triplet]) -> None:
        """dat_lmr_sync_rdma_write: incoming RDMA Writes become visible to this process."""
        self.run(self.core.lmr_sync(True, local_segments))

    def pz_create(self) -> Pz:
        """dat_pz_create."""
        return Pz(self, self.run(self.core.pz_create()))

    def evd_create(
        self, min_qlen: int, flags: int = EvdFlags.DEFAULT, cno: Cno | None = None
    ) -> Evd:
        """dat_evd_create (``cno``: the CNO to wake when an event arrives)."""
        self._open()
        return Evd(self, self.run(self.core.evd_create(min_qlen, flags, cno.handle if cno else 0)))

    def cno_create(self, agent: Any = None) -> Cno:
        """dat_cno_create (``agent``: its DAT_OS_WAIT_PROXY_AGENT, which dat_cno_query reports)."""
        self._open()
        return Cno(self, self.core.cno_create(agent))

    def _identify(self, handle: Any) -> tuple[HandleType, int]:
        """A handle of this IA as (type, number); DAT_INVALID_HANDLE for anything else."""
        self._open()
        if handle is self:
            return HandleType.IA, 0
        if isinstance(handle, Handle) and handle.ia is self:
            return handle.TYPE, handle.handle
        raise DatInvalidHandle(Sub.NO_SUBTYPE, f"not a handle of this IA: {handle!r}")

    def _until(
        self,
        ready: Callable[[], bool],
        timeout: int,
        dead_ok: bool = False,
        arm: Callable[[], None] | None = None,
        spin: float = 0.0,
    ) -> None:
        """Until ``ready()``: look for ``spin`` seconds, then read the socket, sleeping in it
        after ``arm()`` asked the daemon for a NOTIFY; DAT_TIMEOUT_EXPIRED after ``timeout``
        µs."""
        if ready():
            return
        deadline = None if timeout == TIMEOUT_INFINITE else time.monotonic() + timeout / 1e6
        self._pump(0)
        self.kick()
        if spin and self._spun(ready, min(spin, timeout / 1e6)):
            return
        while True:
            if arm is not None and not self.core.catastrophic:
                arm()  # then look once more: what came before the ARM is seen now
            if ready():
                return
            if self.core.catastrophic and not dead_ok:
                raise DatAbort(message="the IA's daemon is gone")
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise DatTimeoutExpired(message=f"nothing within {timeout} us")
            if self.core.catastrophic:
                time.sleep(min(remaining or 0.05, 0.05))
            self._pump(remaining)
            if ready():  # woken with what it waited for: no new ARM left behind
                return

    @staticmethod
    def _spun(ready: Callable[[], bool], spin: float) -> bool:
        """Poll ``ready()`` for ``spin`` seconds, yielding the CPU between looks (the daemons,
        which produce the events, may share it)."""
        end = time.perf_counter() + spin
        while time.perf_counter() < end:
            if ready():
                return True
            os.sched_yield()
        return False

    def lmr_create(
        self,
        mem_type: int,
        region: Buffer | int | tuple[bytes, Buffer | int] | Lmr,
        length: int,
        pz: Pz,
        privileges: int,
    ) -> Lmr:
        """dat_lmr_create: VIRTUAL memory comes from :meth:`alloc`, SHARED_VIRTUAL is
        ``(cookie, memory from alloc_shared)``, LMR is an existing Lmr."""
        if isinstance(region, Lmr):
            region = region.handle
        self._open()
        if isinstance(region, Buffer):
            region = region.address
        elif isinstance(region, tuple) and len(region) == 2 and isinstance(region[1], Buffer):
            region = (region[0], region[1].address)
        op = self.core.lmr_create(
            mem_type, region, length, pz.handle, privileges, self.arena.locate
        )
        return Lmr(self, self.run(op))

    def rmr_create(self, pz: Pz) -> Rmr:
        """dat_rmr_create: a memory window in ``pz`` (scope DAT_RMR_SCOPE_PZ)."""
        return Rmr(self, self.run(self.core.rmr_create(pz.handle)), pz)

    def rmr_create_for_ep(self, pz: Pz) -> Rmr:
        """dat_rmr_create_for_ep: a window of DAT_RMR_SCOPE_EP, whose key reaches memory only
        through the connection of the EP it was bound on."""
        return Rmr(self, self.run(self.core.rmr_create(pz.handle, True)), pz, for_ep=True)

    def ep_create(
        self,
        pz: Pz,
        recv_evd: Evd | None,
        request_evd: Evd | None,
        connect_evd: Evd | None,
        attr: EpAttr | None = None,
    ) -> Ep:
        """dat_ep_create."""
        recv, req, conn = (e.handle if e else 0 for e in (recv_evd, request_evd, connect_evd))
        return Ep(self, self.run(self.core.ep_create(pz.handle, recv, req, conn, attr)))

    def srq_create(
        self, pz: Pz, max_recv_dtos: int, max_recv_iov: int = 1, low_watermark: int = 0
    ) -> Srq:
        """dat_srq_create: a shared receive queue in ``pz`` (DAT_SRQ_ATTR as arguments)."""
        core = self.core
        return Srq(
            self, self.run(core.srq_create(pz.handle, max_recv_dtos, max_recv_iov, low_watermark))
        )

    def ep_create_with_srq(
        self,
        pz: Pz,
        recv_evd: Evd | None,
        request_evd: Evd | None,
        connect_evd: Evd | None,
        srq: Srq,
        attr: EpAttr | None = None,
    ) -> Ep:
        """dat_ep_create_with_srq: an endpoint whose receives come from ``srq``."""
        recv, req, conn = (e.handle if e else 0 for e in (recv_evd, request_evd, connect_evd))
        op = self.core.ep_create_with_srq(pz.handle, recv, req, conn, srq.handle, attr)
        return Ep(self, self.run(op))

    def psp_create(self, conn_qual: int, evd: Evd, flags: int = PspFlags.CONSUMER) -> Psp:
        """dat_psp_create: listen on ``conn_qual``; requests arrive on ``evd``."""
        return Psp(self, self.run(self.core.psp_create(conn_qual, evd.handle, flags)))

    def psp_create_any(self, evd: Evd, flags: int = PspFlags.CONSUMER) -> tuple[Psp, int]:
        """dat_psp_create_any: a PSP on a conn_qual nobody on the node listens on: (psp,
        conn_qual)."""
        op = self.core.psp_create_any(evd.handle, flags, secrets.randbelow(ANY_QUALS))
        psp, conn_qual = self.run(op)
        return Psp(self, psp), conn_qual

    def rsp_create(self, conn_qual: int, ep: Ep, evd: Evd) -> Rsp:
        """dat_rsp_create: one request, for ``ep``."""
        return Rsp(self, self.run(self.core.rsp_create(conn_qual, ep.handle, evd.handle)))

    def cr(self, event: Event) -> Cr:
        """The CR of a CONNECTION_REQUEST event."""
        return Cr(self, event.cr)

    def __enter__(self) -> Ia:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
