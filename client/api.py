"""The blocking DAT API: objects with the spec's method names, over one unix socket per IA."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import select
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any

from client.core import Call, ClientCore, CrInfo, Event, LmrInfo, Op, Triplet
from client.shm import Arena, Buffer, QueueMaps
from proto.attrs import EpAttr
from proto.codec import hello
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    CompletionFlags,
    DatReturnSubtype,
    Dtos,
    EpState,
    EvdFlags,
    MemPriv,
    MemType,
    PspFlags,
)
from proto.errors import (
    DatAbort,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatProviderNotFound,
    DatQueueEmpty,
    DatTimeoutExpired,
)
from proto.frames import ROLE_ADMIN, ROLE_CONSUMER
from proto.hostif import ASYNC_EVD

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


class Ia:
    """An open Interface Adapter: one consumer connection to the node's daemon (dat_ia_open)."""

    def __init__(
        self, name: str = DEFAULT_IA_NAME, async_evd_qlen: int = 8, *, admin: bool = False
    ) -> None:
        """``admin``: ``name`` is a daemon's admin socket (proto.frames.admin_socket), and the
        connection serves ClientCore.admin calls only (client.faults uses it)."""
        path = socket_for(name)
        self.name = name
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.queues = QueueMaps()
        self.core = ClientCore(self.token, self.queues, async_evd_qlen)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._poller = select.poll()  # poll(2): any descriptor number (select(2) stops at 1,024)
        self._poller.register(self.sock, select.POLLIN)
        try:
            self.sock.connect(path)
        except OSError as err:
            self.sock.close()
            raise DatProviderNotFound(Sub.NAME_NOT_REGISTERED, f"{name}: {path}: {err}") from None
        self.arena = Arena(self.token)
        self.closed = False
        self._send(hello(ROLE_ADMIN if admin else ROLE_CONSUMER, self.token))
        deadline = time.monotonic() + 10.0
        while not self.core.ready:
            if self.core.catastrophic or time.monotonic() > deadline:
                self.close()
                raise DatProviderNotFound(Sub.NAME_NOT_REGISTERED, f"{name}: no HELLO from {path}")
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
        result: dict[str, Any] = self.run(self.core.ia_query())
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
        if self.core.catastrophic:  # the daemon cannot remove this IA's queues any more
            self.queues.remove(self.core.queue_segments())

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

    def cno_create(self) -> Cno:
        """dat_cno_create."""
        return Cno(self, self.core.cno_create())

    def _until(
        self,
        ready: Callable[[], bool],
        timeout: int,
        dead_ok: bool = False,
        arm: Callable[[], None] | None = None,
    ) -> None:
        """Until ``ready()``: read the socket, sleeping in it after ``arm()`` asked the daemon
        for a NOTIFY; DAT_TIMEOUT_EXPIRED after ``timeout`` µs."""
        if ready():
            return
        deadline = None if timeout == TIMEOUT_INFINITE else time.monotonic() + timeout / 1e6
        self._pump(0)
        self.kick()
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
        """dat_rmr_create: a memory window in ``pz``."""
        return Rmr(self, self.run(self.core.rmr_create(pz.handle)), pz)

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

    def psp_create(self, conn_qual: int, evd: Evd, flags: int = PspFlags.CONSUMER) -> Psp:
        """dat_psp_create: listen on ``conn_qual``; requests arrive on ``evd``."""
        return Psp(self, self.run(self.core.psp_create(conn_qual, evd.handle, flags)))

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


class _Handle:
    def __init__(self, ia: Ia, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.handle}>"


class Pz(_Handle):
    """A protection zone."""

    def free(self) -> None:
        """dat_pz_free."""
        self.ia.run(self.ia.core.pz_free(self.handle))


class Evd(_Handle):
    """An event dispatcher."""

    def dequeue(self) -> Event:
        """dat_evd_dequeue: DAT_QUEUE_EMPTY when nothing is queued (an empty EVD reads the
        socket once, so a dead daemon's IA_CATASTROPHIC shows, and kicks the EPs' queues)."""
        core = self.ia.core
        try:
            return self._handed_out(core.evd_dequeue(self.handle))
        except DatQueueEmpty:
            self.ia._pump(0)
            self.ia.kick()
        return self._handed_out(core.evd_dequeue(self.handle))

    def _handed_out(self, event: Event) -> Event:
        if event.cr:
            return replace(event, cr_handle=Cr(self.ia, event.cr))
        return event

    def wait(self, timeout: int = TIMEOUT_INFINITE, threshold: int = 1) -> tuple[Event, int]:
        """dat_evd_wait: (event, nmore); DAT_TIMEOUT_EXPIRED carries ``nmore`` too."""
        core = self.ia.core
        evd = core.evd_wait_begin(self.handle, threshold)
        try:
            if not core.evd_ready(evd, threshold):  # else, nothing to wait for
                self.ia._until(
                    lambda: core.evd_ready(evd, threshold),
                    timeout,
                    dead_ok=self.handle == ASYNC_EVD,
                    arm=lambda: core.arm((evd,), threshold),
                )
        except DatTimeoutExpired:
            raise core.evd_timeout(evd, threshold, timeout) from None
        finally:
            evd.waiting = False
        event = self._handed_out(evd.pop())
        return event, len(evd.queue)

    def post_se(self, pointer: Any = None) -> None:
        """dat_evd_post_se: queue a software event."""
        self.ia.run(self.ia.core.evd_post_se(self.handle, pointer))

    def free(self) -> None:
        """dat_evd_free."""
        self.ia.run(self.ia.core.evd_free(self.handle))


class Cno(_Handle):
    """A consumer notification object: one waiter for many EVDs."""

    def wait(self, timeout: int = TIMEOUT_INFINITE) -> Evd:
        """dat_cno_wait: the EVD that has an event."""
        found: list[int] = []

        def ready() -> bool:
            evd = self.ia.core.cno_ready(self.handle)
            if evd:
                found.append(evd)
            return bool(evd)

        core = self.ia.core
        evds = [core.evds[h] for h in sorted(core.cnos.get(self.handle, ()))]
        self.ia._until(ready, timeout, arm=lambda: core.arm(evds, 1))
        return Evd(self.ia, found[-1])

    def free(self) -> None:
        """dat_cno_free."""
        self.ia.core.cno_free(self.handle)


class Lmr(_Handle):
    """A registered local memory region."""

    def __init__(self, ia: Ia, info: LmrInfo) -> None:
        super().__init__(ia, info.handle)
        self.info = info
        self.lmr_context = info.lmr_context
        self.rmr_context = info.rmr_context
        self.registered_size = info.registered_size
        self.registered_address = info.registered_address

    def triplet(self, offset: int = 0, length: int | None = None) -> list[int]:
        """An LMR triplet [virtual_address, segment_length, lmr_context] into this region."""
        if length is None:
            length = self.registered_size - offset
        return [self.registered_address + offset, length, self.lmr_context]

    def remote(self, offset: int = 0, length: int | None = None) -> list[int]:
        """The RMR triplet a peer needs to reach this region."""
        if length is None:
            length = self.registered_size - offset
        return [self.registered_address + offset, length, self.rmr_context]

    def query(self) -> LmrInfo:
        """dat_lmr_query."""
        if self.handle not in self.ia.core.lmrs:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, f"LMR {self.handle} was freed")
        return self.info

    def free(self) -> None:
        """dat_lmr_free."""
        self.ia.run(self.ia.core.lmr_free(self.handle))


class Ep(_Handle):
    """An endpoint."""

    @property
    def state(self) -> EpState:
        """The endpoint state as last reported (dat_ep_get_status)."""
        self.ia._pump(0)
        return self.ia.core.ep_mirror(self.handle).state

    @property
    def attr(self) -> EpAttr:
        """The endpoint attributes granted at creation (dat_ep_query)."""
        return self.ia.core.ep_mirror(self.handle).attr

    def query(self) -> dict[str, Any]:
        """dat_ep_query: state, PZ, EVDs and the attributes (DAT_EP_PARAM)."""
        self.ia._pump(0)
        ep = self.ia.core.ep_mirror(self.handle)
        return {
            "ia": self.ia,
            "ep_state": ep.state,
            "pz": ep.pz,
            "recv_evd": ep.recv_evd,
            "request_evd": ep.request_evd,
            "connect_evd": ep.connect_evd,
            "ep_attr": ep.attr,
        }

    def get_status(self) -> tuple[EpState, bool, bool]:
        """dat_ep_get_status: (state, recv_idle, request_idle)."""
        self.ia._pump(0)
        ep = self.ia.core.ep_mirror(self.handle)
        return ep.state, ep.recvs == 0, ep.requests == 0

    def modify(
        self,
        *,
        pz: Pz | None = None,
        recv_evd: Evd | None = None,
        request_evd: Evd | None = None,
        connect_evd: Evd | None = None,
        attr: EpAttr | None = None,
    ) -> None:
        """dat_ep_modify: what is given changes (PZ, EVDs, attributes), before connecting."""
        changes: dict[str, Any] = {}
        for name, value in (
            ("pz", pz),
            ("recv_evd", recv_evd),
            ("request_evd", request_evd),
            ("connect_evd", connect_evd),
        ):
            if value is not None:
                changes[name] = value.handle
        if attr is not None:
            changes["attr"] = attr
        self.ia.run(self.ia.core.ep_modify(self.handle, changes))

    def connect(
        self,
        remote_addr: Any,
        conn_qual: int,
        timeout: int = TIMEOUT_INFINITE,
        private_data: bytes = b"",
    ) -> None:
        """dat_ep_connect."""
        self.ia.run(
            self.ia.core.ep_connect(self.handle, remote_addr, conn_qual, timeout, private_data)
        )

    def disconnect(self, flags: int = CloseFlags.ABRUPT) -> None:
        """dat_ep_disconnect."""
        self.ia.run(self.ia.core.ep_disconnect(self.handle, flags))

    def reset(self) -> None:
        """dat_ep_reset."""
        self.ia.run(self.ia.core.ep_reset(self.handle))

    def free(self) -> None:
        """dat_ep_free."""
        self.ia.run(self.ia.core.ep_free(self.handle))

    def _post(
        self,
        kind: Dtos,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet | None,
        flags: int,
    ) -> None:
        doorbell = self.ia.core.post(kind, self.handle, local_iov, cookie, remote, flags)
        if doorbell:
            self.ia._send(doorbell)

    def post_send(
        self, local_iov: Sequence[Triplet], cookie: int = 0, flags: int = CompletionFlags.DEFAULT
    ) -> None:
        """dat_ep_post_send."""
        self._post(Dtos.SEND, local_iov, cookie, None, flags)

    def post_recv(
        self, local_iov: Sequence[Triplet], cookie: int = 0, flags: int = CompletionFlags.DEFAULT
    ) -> None:
        """dat_ep_post_recv."""
        self._post(Dtos.RECEIVE, local_iov, cookie, None, flags)

    def post_rdma_write(
        self,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ep_post_rdma_write."""
        self._post(Dtos.RDMA_WRITE, local_iov, cookie, remote, flags)

    def post_rdma_read(
        self,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ep_post_rdma_read."""
        self._post(Dtos.RDMA_READ, local_iov, cookie, remote, flags)


class Rmr(_Handle):
    """A memory window: bound with dat_rmr_bind to part of an LMR, it has its own key."""

    def __init__(self, ia: Ia, handle: int, pz: Pz) -> None:
        super().__init__(ia, handle)
        self.pz = pz
        self.lmr: Lmr | None = None
        self.target: list[int] = [0, 0, 0]
        self.privileges = 0
        self.rmr_context = 0

    def bind(
        self,
        lmr: Lmr | None,
        lmr_triplet: Triplet,
        privileges: int,
        ep: Ep,
        cookie: int = 0,
        flags: int = CompletionFlags.DEFAULT,
    ) -> int:
        """dat_rmr_bind: returns the new rmr_context (a length of 0 unbinds)."""
        context: int = self.ia.run(
            self.ia.core.rmr_bind(
                self.handle,
                lmr.handle if lmr else 0,
                lmr_triplet,
                privileges,
                ep.handle,
                cookie,
                flags,
            )
        )
        self.lmr, self.privileges, self.rmr_context = lmr, privileges, context
        self.target = [int(lmr_triplet[0]), int(lmr_triplet[1]), context]
        return context

    def remote(self, offset: int = 0, length: int | None = None) -> list[int]:
        """The RMR triplet a peer needs to reach (part of) the bound window."""
        address, size, context = self.target
        return [address + offset, size - offset if length is None else length, context]

    def query(self) -> dict[str, Any]:
        """dat_rmr_query: PZ, LMR, bound range, privileges and current context."""
        return {
            "pz": self.pz,
            "lmr": self.lmr,
            "lmr_triplet": self.target[:2],
            "mem_privileges": self.privileges,
            "rmr_context": self.rmr_context,
        }

    def free(self) -> None:
        """dat_rmr_free."""
        self.ia.run(self.ia.core.rmr_free(self.handle))


class Psp(_Handle):
    """A public service point."""

    def free(self) -> None:
        """dat_psp_free."""
        self.ia.run(self.ia.core.psp_free(self.handle))


class Rsp(_Handle):
    """A reserved service point."""

    def free(self) -> None:
        """dat_rsp_free."""
        self.ia.run(self.ia.core.rsp_free(self.handle))


class Cr(_Handle):
    """A connection request."""

    def query(self) -> CrInfo:
        """dat_cr_query."""
        info = self.ia.core.crs.get(self.handle)
        if info is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CR, f"no connection request {self.handle}")
        return info

    def accept(self, ep: Ep | None, private_data: bytes = b"") -> None:
        """dat_cr_accept."""
        self.ia.run(self.ia.core.cr_accept(self.handle, ep.handle if ep else None, private_data))

    def reject(self, private_data: bytes = b"") -> None:
        """dat_cr_reject."""
        self.ia.run(self.ia.core.cr_reject(self.handle, private_data))


__all__ = ["Cr", "Ep", "Evd", "Ia", "Lmr", "MemPriv", "MemType", "Psp", "Pz", "Rsp"]
