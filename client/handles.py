"""The objects the blocking DAT API hands out (PZ, EVD, CNO, LMR, EP, RMR, PSP, RSP, CR): each
a handle of its IA, with the spec's method names (dat_ep_post_send is ``Ep.post_send``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from client.core import CrInfo, Event, LmrInfo, Triplet
from client.records import WindowState
from proto.attrs import EpAttr
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    CompletionFlags,
    DatReturnSubtype,
    Dtos,
    EpState,
    MemPriv,
    MemType,
)
from proto.errors import (
    DatInvalidHandle,
    DatQueueEmpty,
    DatTimeoutExpired,
)
from proto.hostif import ASYNC_EVD

if TYPE_CHECKING:
    from client.api import Ia

Sub = DatReturnSubtype


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
        event = self._handed_out(core.take(evd))
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
        return self.ia.core.ep_mirror(self.handle).param(self.ia)

    def get_status(self) -> tuple[EpState, bool, bool]:
        """dat_ep_get_status: (state, recv_idle, request_idle)."""
        self.ia._pump(0)
        return self.ia.core.ep_mirror(self.handle).status()

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
        operands: tuple[int, int] = (0, 0),
    ) -> None:
        core = self.ia.core
        post = core.post_extended if kind >= Dtos.IB_RDMA_WRITE_IMMED else core.post
        doorbell = post(kind, self.handle, local_iov, cookie, remote, flags, operands)
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

    def post_fetch_and_add(
        self,
        add_value: int,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ib_post_fetch_and_add: ``add_value`` is added to the 8 bytes at the remote
        address, atomically; their original value lands in the 8-byte local segment."""
        self._post(Dtos.IB_FETCH_ADD, local_iov, cookie, remote, flags, (add_value, 0))

    def post_cmp_and_swap(
        self,
        compare: int,
        swap: int,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ib_post_cmp_and_swap: the 8 remote bytes become ``swap`` if they equal
        ``compare``, atomically; their original value lands in the 8-byte local segment."""
        self._post(Dtos.IB_CMP_SWAP, local_iov, cookie, remote, flags, (swap, compare))

    def post_rdma_write_immed(
        self,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        immediate: int,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ib_post_rdma_write_immed: an RDMA Write that also consumes a receive at the
        target, which completes with the 32-bit ``immediate`` data."""
        self._post(Dtos.IB_RDMA_WRITE_IMMED, local_iov, cookie, remote, flags, (immediate, 0))


class Rmr(_Handle, WindowState):
    """A memory window: bound with dat_rmr_bind to part of an LMR, it has its own key."""

    def __init__(self, ia: Ia, handle: int, pz: Pz) -> None:
        _Handle.__init__(self, ia, handle)
        WindowState.__init__(self, pz)

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
        lmr_handle = lmr.handle if lmr else 0
        bind = self.ia.core.rmr_bind(
            self.handle, lmr_handle, lmr_triplet, privileges, ep.handle, cookie, flags
        )
        return self._bound(lmr, lmr_triplet, privileges, self.ia.run(bind))

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
