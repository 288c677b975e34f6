"""The objects the asyncio IA hands out (client.aio.AsyncIa): EVDs, CNOs, endpoints and memory
windows; what asks the daemon is a coroutine, what never waits (dequeue, posts) is not."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Final, NoReturn

from client.common import decline
from client.core import Event, LmrInfo, Triplet
from client.records import WindowState
from proto.attrs import EpAttr
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    CompletionFlags,
    DatReturnSubtype,
    Dtos,
    EpState,
    HandleType,
)
from proto.errors import DatAbort, DatInvalidState, DatQueueEmpty, DatTimeoutExpired

if TYPE_CHECKING:
    from client.aio import AsyncIa


def _seconds(timeout: int) -> float | None:
    return None if timeout == TIMEOUT_INFINITE else timeout / 1e6


_EXTENDED: Final = Dtos.IB_RDMA_WRITE_IMMED  # (a module constant: enum attributes are slow)


class TypedHandle(int):
    """A handle the asyncio API gives as a number (PZ, PSP, RSP), typed for
    dat_get_handle_type: it is still the int every call takes."""

    TYPE: ClassVar[HandleType]


class PzHandle(TypedHandle):
    """A PZ of AsyncIa.pz_create."""

    TYPE = HandleType.PZ


class PspHandle(TypedHandle):
    """A PSP of AsyncIa.psp_create."""

    TYPE = HandleType.PSP


class RspHandle(TypedHandle):
    """An RSP of AsyncIa.rsp_create."""

    TYPE = HandleType.RSP


class AsyncEvd:
    """An EVD whose wait is a coroutine."""

    def __init__(self, ia: AsyncIa, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    def dequeue(self) -> Event:
        """dat_evd_dequeue (an empty EVD kicks the EPs' queues, see ClientCore.kick)."""
        try:
            return self.ia.core.evd_dequeue(self.handle)
        except DatQueueEmpty:
            self.ia.kick()
            raise

    async def wait(self, timeout: int = TIMEOUT_INFINITE, threshold: int = 1) -> tuple[Event, int]:
        """dat_evd_wait: (event, nmore); a second concurrent waiter gets DAT_INVALID_STATE, and
        so does a waiter of an EVD made unwaitable meanwhile."""
        core = self.ia.core
        evd = core.evd_wait_begin(self.handle, threshold)
        seconds = _seconds(timeout)
        try:
            await self.ia._until(
                lambda: core.evd_ready(evd, threshold) or core.catastrophic or not evd.waitable,
                seconds,
                arm=lambda: core.arm((evd,), threshold),
            )
        except TimeoutError:
            raise core.evd_timeout(evd, threshold, timeout) from None
        finally:
            evd.waiting = False
        if not evd.waitable:
            raise DatInvalidState(
                DatReturnSubtype.INVALID_STATE_EVD_UNWAITABLE, "the EVD became unwaitable"
            )
        if not core.evd_ready(evd, threshold):
            raise DatAbort(message="the IA's daemon is gone")
        event = core.take(evd)
        return event, len(evd.queue)

    async def post_se(self, pointer: Any = None) -> None:
        """dat_evd_post_se (wakes a waiter of this IA)."""
        await self.ia.run(self.ia.core.evd_post_se(self.handle, pointer))
        self.ia._wake()

    def query(self) -> dict[str, Any]:
        """dat_evd_query: DAT_EVD_PARAM (the IA, qlen, state, CNO and flags)."""
        param = self.ia.core.evd_query(self.handle)
        cno = param["cno"]
        return {**param, "ia": self.ia, "cno": AsyncCno(self.ia, cno) if cno else None}

    async def resize(self, qlen: int) -> None:
        """dat_evd_resize: DAT_INVALID_STATE while more than ``qlen`` events are queued."""
        await self.ia.run(self.ia.core.evd_resize(self.handle, qlen))

    def modify_cno(self, cno: AsyncCno | None) -> None:
        """dat_evd_modify_cno: the CNO this EVD wakes (None: none)."""
        self.ia.core.evd_modify_cno(self.handle, cno.handle if cno is not None else 0)
        self.ia._wake()  # a CNO waiter looks at its EVDs again

    def enable(self) -> None:
        """dat_evd_enable."""
        self.ia.core.evd_enable(self.handle, True)
        self.ia._wake()

    def disable(self) -> None:
        """dat_evd_disable: events still queue, but wake no waiter of the EVD's CNO."""
        self.ia.core.evd_enable(self.handle, False)

    def set_unwaitable(self) -> None:
        """dat_evd_set_unwaitable: a waiter returns DAT_INVALID_STATE, later waits refuse."""
        self.ia.core.evd_waitable(self.handle, False)
        self.ia._wake()

    def clear_unwaitable(self) -> None:
        """dat_evd_clear_unwaitable."""
        self.ia.core.evd_waitable(self.handle, True)

    async def free(self) -> None:
        """dat_evd_free."""
        await self.ia.run(self.ia.core.evd_free(self.handle))


class AsyncEp:
    """An endpoint: connection calls are coroutines, posts are plain calls."""

    def __init__(self, ia: AsyncIa, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    @property
    def state(self) -> EpState:
        """The endpoint state as last reported."""
        return self.ia.core.ep_mirror(self.handle).state

    async def connect(
        self,
        remote_addr: Any,
        conn_qual: int,
        timeout: int = TIMEOUT_INFINITE,
        private_data: bytes = b"",
    ) -> None:
        """dat_ep_connect."""
        await self.ia.run(
            self.ia.core.ep_connect(self.handle, remote_addr, conn_qual, timeout, private_data)
        )

    async def dup_connect(
        self, dup_ep: AsyncEp, timeout: int = TIMEOUT_INFINITE, private_data: bytes = b""
    ) -> None:
        """dat_ep_dup_connect: to the remote address and conn_qual the CONNECTED ``dup_ep``
        connected to."""
        await self.ia.run(
            self.ia.core.ep_dup_connect(self.handle, dup_ep.handle, timeout, private_data)
        )

    def common_connect(self, *args: Any) -> NoReturn:
        """dat_ep_common_connect: declined (DAT_MODEL_NOT_SUPPORTED: no CSP to connect to)."""
        decline("dat_ep_common_connect")

    def recv_query(self) -> tuple[int, int]:
        """dat_ep_recv_query: (nbufs_allocated, bufs_alloc_span)."""
        return self.ia.core.ep_recv_query(self.handle)

    async def set_watermark(self, soft_high_watermark: int, hard_high_watermark: int) -> None:
        """dat_ep_set_watermark (WATERMARK_INFINITE: none)."""
        await self.ia.run(
            self.ia.core.ep_set_watermark(self.handle, soft_high_watermark, hard_high_watermark)
        )

    def post_send_with_invalidate(self, *args: Any) -> NoReturn:
        """dat_ep_post_send_with_invalidate: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_ep_post_send_with_invalidate")

    def post_rdma_read_to_rmr(self, *args: Any) -> NoReturn:
        """dat_ep_post_rdma_read_to_rmr: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_ep_post_rdma_read_to_rmr")

    async def disconnect(self, flags: int = CloseFlags.ABRUPT) -> None:
        """dat_ep_disconnect."""
        await self.ia.run(self.ia.core.ep_disconnect(self.handle, flags))

    async def reset(self) -> None:
        """dat_ep_reset."""
        await self.ia.run(self.ia.core.ep_reset(self.handle))

    async def free(self) -> None:
        """dat_ep_free."""
        await self.ia.run(self.ia.core.ep_free(self.handle))

    def post(
        self,
        kind: Dtos,
        local_iov: Sequence[Triplet],
        cookie: int = 0,
        remote: Triplet | None = None,
        flags: int = CompletionFlags.DEFAULT,
        operands: tuple[int, int] = (0, 0),
    ) -> None:
        """dat_ep_post_send / _recv / _rdma_write / _rdma_read, and dat_ib_post_fetch_and_add /
        _cmp_and_swap / _rdma_write_immed, by ``kind``; ``operands``: (add_value, 0),
        (swap, compare) or (immediate, 0) of the IB ones."""
        core = self.ia.core
        post = core.post_extended if kind >= _EXTENDED else core.post
        doorbell = post(kind, self.handle, local_iov, cookie, remote, flags, operands)
        if doorbell:
            self.ia.send(doorbell)

    def query(self) -> dict[str, Any]:
        """dat_ep_query: state, PZ, EVDs and the attributes (DAT_EP_PARAM)."""
        return self.ia.core.ep_mirror(self.handle).param(self.ia)

    def get_status(self) -> tuple[EpState, bool, bool]:
        """dat_ep_get_status: (state, recv_idle, request_idle)."""
        return self.ia.core.ep_mirror(self.handle).status()

    async def modify(
        self,
        *,
        pz: int | None = None,
        recv_evd: AsyncEvd | None = None,
        request_evd: AsyncEvd | None = None,
        connect_evd: AsyncEvd | None = None,
        attr: EpAttr | None = None,
    ) -> None:
        """dat_ep_modify: what is given changes (PZ, EVDs, attributes), before connecting."""
        changes: dict[str, Any] = {} if pz is None else {"pz": pz}
        for name, evd in (
            ("recv_evd", recv_evd),
            ("request_evd", request_evd),
            ("connect_evd", connect_evd),
        ):
            if evd is not None:
                changes[name] = evd.handle
        if attr is not None:
            changes["attr"] = attr
        await self.ia.run(self.ia.core.ep_modify(self.handle, changes))


class AsyncCno:
    """A consumer notification object: one waiter for many EVDs."""

    def __init__(self, ia: AsyncIa, handle: int) -> None:
        self.ia = ia
        self.handle = handle

    async def wait(self, timeout: int = TIMEOUT_INFINITE) -> AsyncEvd:
        """dat_cno_wait: the EVD that has an event."""
        core = self.ia.core
        found: list[int] = []

        def ready() -> bool:
            evd = core.cno_ready(self.handle)
            if evd:
                found.append(evd)
            return bool(evd) or core.catastrophic

        def arm() -> None:
            core.arm([core.evds[h] for h in sorted(core.cnos.get(self.handle, ()))], 1)

        try:
            await self.ia._until(ready, _seconds(timeout), arm=arm)
        except TimeoutError:
            raise DatTimeoutExpired(message=f"nothing within {timeout} us") from None
        if not found:
            raise DatAbort(message="the IA's daemon is gone")
        return AsyncEvd(self.ia, found[-1])

    def query(self) -> dict[str, Any]:
        """dat_cno_query: DAT_CNO_PARAM (the IA, the proxy type and agent)."""
        return {**self.ia.core.cno_query(self.handle), "ia": self.ia}

    def modify_agent(self, agent: Any) -> None:
        """dat_cno_modify_agent."""
        self.ia.core.cno_modify_agent(self.handle, agent)

    def trigger(self) -> NoReturn:
        """dat_cno_trigger: declined (DAT_MODEL_NOT_SUPPORTED: no CNO behind a descriptor)."""
        decline("dat_cno_trigger")

    def free(self) -> None:
        """dat_cno_free."""
        self.ia.core.cno_free(self.handle)


class AsyncRmr(WindowState):
    """A memory window: bound with dat_rmr_bind to part of an LMR, it has its own key."""

    def __init__(self, ia: AsyncIa, handle: int, pz: int, for_ep: bool = False) -> None:
        super().__init__(pz, for_ep)
        self.ia = ia
        self.handle = handle

    async def bind(
        self,
        lmr: LmrInfo | None,
        lmr_triplet: Triplet,
        privileges: int,
        ep: AsyncEp,
        cookie: int = 0,
        flags: int = CompletionFlags.DEFAULT,
    ) -> int:
        """dat_rmr_bind: returns the new rmr_context (a length of 0 unbinds)."""
        lmr_handle = lmr.handle if lmr else 0
        bind = self.ia.core.rmr_bind(
            self.handle, lmr_handle, lmr_triplet, privileges, ep.handle, cookie, flags
        )
        return self._bound(lmr, lmr_triplet, privileges, await self.ia.run(bind))

    async def free(self) -> None:
        """dat_rmr_free."""
        await self.ia.run(self.ia.core.rmr_free(self.handle))
