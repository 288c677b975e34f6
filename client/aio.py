"""The asyncio DAT API: the same core as the blocking API, driven by an asyncio protocol.

Calls that wait for the daemon (connect, accept, lmr_create, ...) and dat_evd_wait are
coroutines; posts and dat_evd_dequeue are plain calls, as they never wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import time
from collections.abc import Callable, Sequence
from typing import Any

from client.aio_objects import (
    AsyncCno,
    AsyncEp,
    AsyncEvd,
    AsyncRmr,
    PspHandle,
    PzHandle,
    RspHandle,
    TypedHandle,
)
from client.api import DEFAULT_IA_NAME, socket_for
from client.cmcalls import ANY_QUALS
from client.common import HandleCalls
from client.core import ClientCore, CrInfo, Event, LmrInfo, Op, Triplet
from client.desk import Desk
from client.shm import Arena, Buffer, QueueMaps
from client.srq_objects import AsyncSrq
from proto.attrs import EpAttr
from proto.codec import hello
from proto.constants import (
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
)
from proto.frames import ROLE_CONSUMER
from proto.hostif import ASYNC_EVD

Sub = DatReturnSubtype


class _Protocol(asyncio.Protocol):
    def __init__(self, core: ClientCore, wake: Callable[[], None]) -> None:
        self.core = core
        self.wake = wake

    def data_received(self, data: bytes) -> None:
        self.core.feed(data)
        self.wake()

    def connection_lost(self, exc: Exception | None) -> None:
        self.core.lost(f"daemon connection lost ({exc!r})")
        self.wake()


class AsyncIa(HandleCalls):
    """An open IA for asyncio programs (``await AsyncIa.open(name)``)."""

    def __init__(self, name: str, async_evd_qlen: int) -> None:
        self.name = name
        self.token = f"{os.getpid()}-{secrets.token_hex(4)}"
        self.desk = Desk(socket_for(name), self.token)
        self.queues = QueueMaps(self.desk)
        self.core = ClientCore(self.token, self.queues, async_evd_qlen)
        self.arena = Arena(self.desk)
        self.transport: asyncio.Transport | None = None
        self._waiters: list[asyncio.Future[None]] = []
        self.async_evd = AsyncEvd(self, ASYNC_EVD)
        self.closed = False

    @classmethod
    async def open(cls, name: str = DEFAULT_IA_NAME, async_evd_qlen: int = 8) -> AsyncIa:
        """dat_ia_open."""
        ia = cls(name, async_evd_qlen)
        loop = asyncio.get_running_loop()
        path = socket_for(name)
        try:
            transport, _ = await loop.create_unix_connection(
                lambda: _Protocol(ia.core, ia._wake), path
            )
        except OSError as err:
            ia.arena.close()
            raise DatProviderNotFound(Sub.NAME_NOT_REGISTERED, f"{name}: {err}") from None
        ia.transport = transport
        transport.write(hello(ROLE_CONSUMER, ia.token))
        with contextlib.suppress(TimeoutError):
            await ia._until(lambda: ia.core.ready or ia.core.catastrophic, 10.0)
        if not ia.core.ready:
            await ia.close()
            raise ia.core.open_failure(f"{name} ({path})")
        await ia.run(ia.core.async_evd_create())
        return ia

    # -- plumbing ------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiters, self._waiters = self._waiters, []
        for fut in waiters:
            if not fut.done():
                fut.set_result(None)

    def kick(self) -> None:
        """Ring the doorbells ClientCore.kick asks for (before a wait, on an empty EVD)."""
        doorbells = self.core.kick()
        if doorbells and not self.closed and self.transport is not None:
            self.transport.write(doorbells)

    async def _until(
        self,
        ready: Callable[[], bool],
        timeout: float | None,
        arm: Callable[[], None] | None = None,
    ) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        if ready():
            return
        self.kick()
        while True:
            if arm is not None and not self.core.catastrophic:
                arm()  # then look once more: what came before the ARM is seen now
            if ready():
                return
            fut = asyncio.get_running_loop().create_future()
            self._waiters.append(fut)
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise TimeoutError
            try:
                await asyncio.wait_for(fut, remaining)
            except TimeoutError:
                if not ready():
                    raise
            if ready():  # woken with what it waited for: no new ARM left behind
                return

    def send(self, data: bytes) -> None:
        """Write one frame to the daemon."""
        if self.closed or self.core.catastrophic or self.transport is None:
            raise DatAbort(message="the IA is closed or its daemon is gone")
        self.transport.write(data)

    async def run(self, op: Op) -> Any:
        """Drive an operation of the core, awaiting each reply."""
        try:
            call = next(op)
            while True:
                req_id, data = self.core.call_frame(call)
                self.send(data)
                await self._until(
                    lambda r=req_id: (
                        r in self.core.replies  # type: ignore[misc]
                        or self.core.catastrophic
                    ),
                    None,
                )
                result = self.core.take_reply(req_id)
                if result is None:
                    raise DatAbort(message="the daemon went away during the call")
                call = op.send(result)
        except StopIteration as stop:
            return stop.value

    # -- DAT calls -----------------------------------------------------------------------------

    async def query(self) -> dict[str, Any]:
        """dat_ia_query."""
        result: dict[str, Any] = await self.run(self.core.ia_query(self.name))
        return result

    async def close(self, flags: int = CloseFlags.ABRUPT) -> None:
        """dat_ia_close: GRACEFUL is refused while the IA has EPs or LMRs."""
        if self.closed:
            return
        if flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {flags!r}")
        if flags == CloseFlags.GRACEFUL and (self.core.eps or self.core.lmrs):
            raise DatInvalidState(Sub.INVALID_STATE_IA_IN_USE, "the IA still has objects")
        self.closed = True
        if self.transport is not None:
            self.transport.close()
        self.arena.close()
        self.queues.close()

    def alloc(self, size: int) -> Buffer:
        """Registrable memory from the IA's shared-memory arena."""
        return self.arena.alloc(size)

    async def alloc_shared(self, cookie: bytes, size: int) -> Buffer:
        """Shared memory for a DAT_MEM_TYPE_SHARED_VIRTUAL LMR (the cookie's pages)."""
        name, _ = await self.run(self.core.shared_attach(cookie, size))
        return self.arena.map_shared(name, size)

    def mem_free(self, buf: Buffer) -> None:
        """Return memory from alloc."""
        self.arena.free(buf)

    async def lmr_sync_rdma_read(self, local_segments: Sequence[Triplet]) -> None:
        """dat_lmr_sync_rdma_read: local writes become visible to incoming RDMA Reads."""
        await self.run(self.core.lmr_sync(False, local_segments))

    async def lmr_sync_rdma_write(self, local_segments: Sequence[Triplet]) -> None:
        """dat_lmr_sync_rdma_write: incoming RDMA Writes become visible to this process."""
        await self.run(self.core.lmr_sync(True, local_segments))

    async def pz_create(self) -> PzHandle:
        """dat_pz_create (the PZ handle: an int)."""
        return PzHandle(await self.run(self.core.pz_create()))

    def pz_query(self, pz: int) -> dict[str, Any]:
        """dat_pz_query: DAT_PZ_PARAM (its IA)."""
        self.core.pz_check(pz)
        return {"ia": self}

    async def pz_free(self, pz: int) -> None:
        """dat_pz_free."""
        await self.run(self.core.pz_free(pz))

    async def evd_create(
        self, min_qlen: int, flags: int = EvdFlags.DEFAULT, cno: AsyncCno | None = None
    ) -> AsyncEvd:
        """dat_evd_create (``cno``: the CNO to wake when an event arrives)."""
        handle = await self.run(self.core.evd_create(min_qlen, flags, cno.handle if cno else 0))
        return AsyncEvd(self, handle)

    def cno_create(self, agent: Any = None) -> AsyncCno:
        """dat_cno_create (``agent``: its DAT_OS_WAIT_PROXY_AGENT, which dat_cno_query reports)."""
        return AsyncCno(self, self.core.cno_create(agent))

    def _identify(self, handle: Any) -> tuple[HandleType, int]:
        """A handle of this IA as (type, number): its objects, an LMR's LmrInfo, a connection
        request's event, or a typed number (PZ, PSP, RSP); DAT_INVALID_HANDLE otherwise."""
        if self.closed:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_IA, f"IA {self.name} is closed")
        if handle is self:
            return HandleType.IA, 0
        kinds = ((AsyncEvd, HandleType.EVD), (AsyncEp, HandleType.EP), (AsyncCno, HandleType.CNO))
        for cls, kind in (*kinds, (AsyncRmr, HandleType.RMR), (AsyncSrq, HandleType.SRQ)):
            if isinstance(handle, cls) and handle.ia is self:
                return kind, handle.handle
        if isinstance(handle, LmrInfo):
            return HandleType.LMR, handle.handle
        if isinstance(handle, Event) and handle.cr:
            return HandleType.CR, handle.cr
        if isinstance(handle, TypedHandle):
            return handle.TYPE, int(handle)
        raise DatInvalidHandle(Sub.NO_SUBTYPE, f"not a handle of this IA: {handle!r}")

    async def rmr_create(self, pz: int) -> AsyncRmr:
        """dat_rmr_create: a memory window in ``pz`` (scope DAT_RMR_SCOPE_PZ)."""
        return AsyncRmr(self, await self.run(self.core.rmr_create(pz)), pz)

    async def rmr_create_for_ep(self, pz: int) -> AsyncRmr:
        """dat_rmr_create_for_ep: a window of DAT_RMR_SCOPE_EP (its key reaches memory only
        through the connection of the EP it was bound on)."""
        return AsyncRmr(self, await self.run(self.core.rmr_create(pz, True)), pz, for_ep=True)

    async def lmr_create(
        self, mem_type: int, region: Buffer | int, length: int, pz: int, privileges: int
    ) -> LmrInfo:
        """dat_lmr_create."""
        address = region.address if isinstance(region, Buffer) else region
        info: LmrInfo = await self.run(
            self.core.lmr_create(mem_type, address, length, pz, privileges, self.arena.locate)
        )
        return info

    def lmr_query(self, lmr: LmrInfo) -> LmrInfo:
        """dat_lmr_query."""
        if lmr.handle not in self.core.lmrs:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_LMR, f"LMR {lmr.handle} was freed")
        return lmr

    async def lmr_free(self, lmr: LmrInfo) -> None:
        """dat_lmr_free."""
        await self.run(self.core.lmr_free(lmr.handle))

    async def ep_create(
        self,
        pz: int,
        recv_evd: AsyncEvd | None,
        request_evd: AsyncEvd | None,
        connect_evd: AsyncEvd | None,
        attr: EpAttr | None = None,
    ) -> AsyncEp:
        """dat_ep_create."""
        recv, req, conn = (e.handle if e else 0 for e in (recv_evd, request_evd, connect_evd))
        return AsyncEp(self, await self.run(self.core.ep_create(pz, recv, req, conn, attr)))

    async def srq_create(
        self, pz: int, max_recv_dtos: int, max_recv_iov: int = 1, low_watermark: int = 0
    ) -> AsyncSrq:
        """dat_srq_create."""
        op = self.core.srq_create(pz, max_recv_dtos, max_recv_iov, low_watermark)
        return AsyncSrq(self, await self.run(op))

    async def ep_create_with_srq(
        self,
        pz: int,
        recv_evd: AsyncEvd | None,
        request_evd: AsyncEvd | None,
        connect_evd: AsyncEvd | None,
        srq: AsyncSrq,
        attr: EpAttr | None = None,
    ) -> AsyncEp:
        """dat_ep_create_with_srq."""
        recv, req, conn = (e.handle if e else 0 for e in (recv_evd, request_evd, connect_evd))
        op = self.core.ep_create_with_srq(pz, recv, req, conn, srq.handle, attr)
        return AsyncEp(self, await self.run(op))

    async def psp_create(
        self, conn_qual: int, evd: AsyncEvd, flags: int = PspFlags.CONSUMER
    ) -> PspHandle:
        """dat_psp_create (the PSP handle: an int)."""
        return PspHandle(await self.run(self.core.psp_create(conn_qual, evd.handle, flags)))

    async def psp_create_any(
        self, evd: AsyncEvd, flags: int = PspFlags.CONSUMER
    ) -> tuple[PspHandle, int]:
        """dat_psp_create_any: a PSP on a conn_qual nobody on the node listens on: (psp,
        conn_qual)."""
        op = self.core.psp_create_any(evd.handle, flags, secrets.randbelow(ANY_QUALS))
        psp, conn_qual = await self.run(op)
        return PspHandle(psp), conn_qual

    def psp_query(self, psp: int) -> dict[str, Any]:
        """dat_psp_query: DAT_PSP_PARAM (the IA, conn_qual, CR EVD, flags)."""
        info = self.core.sp_query(psp, rsp=False)
        evd = AsyncEvd(self, info.evd)
        return {"ia": self, "conn_qual": info.conn_qual, "evd": evd, "psp_flags": info.flags}

    async def psp_free(self, psp: int) -> None:
        """dat_psp_free."""
        await self.run(self.core.psp_free(psp))

    async def rsp_create(self, conn_qual: int, ep: AsyncEp, evd: AsyncEvd) -> RspHandle:
        """dat_rsp_create: one request, for ``ep`` (the RSP handle: an int)."""
        return RspHandle(await self.run(self.core.rsp_create(conn_qual, ep.handle, evd.handle)))

    def rsp_query(self, rsp: int) -> dict[str, Any]:
        """dat_rsp_query: DAT_RSP_PARAM (the IA, conn_qual, CR EVD, EP)."""
        info = self.core.sp_query(rsp, rsp=True)
        evd, ep = AsyncEvd(self, info.evd), AsyncEp(self, info.ep)
        return {"ia": self, "conn_qual": info.conn_qual, "evd": evd, "ep": ep}

    async def rsp_free(self, rsp: int) -> None:
        """dat_rsp_free."""
        await self.run(self.core.rsp_free(rsp))

    async def cr_accept(self, event: Event, ep: AsyncEp | None, private_data: bytes = b"") -> None:
        """dat_cr_accept of a CONNECTION_REQUEST event's CR."""
        await self.run(self.core.cr_accept(event.cr, ep.handle if ep else None, private_data))

    async def cr_reject(self, event: Event, private_data: bytes = b"") -> None:
        """dat_cr_reject."""
        await self.run(self.core.cr_reject(event.cr, private_data))

    async def cr_handoff(self, event: Event, conn_qual: int) -> None:
        """dat_cr_handoff: the request goes to the listener of ``conn_qual`` on this node."""
        await self.run(self.core.cr_handoff(event.cr, conn_qual))

    def cr_query(self, event: Event) -> CrInfo:
        """dat_cr_query."""
        return self.core.cr_info(event.cr)

    async def __aenter__(self) -> AsyncIa:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


__all__ = ["AsyncCno", "AsyncEp", "AsyncEvd", "AsyncIa", "AsyncRmr"]
