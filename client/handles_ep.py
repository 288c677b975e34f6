"""The blocking API's endpoint: the spec's EP calls as methods (dat_ep_post_send is
``Ep.post_send``); client.api re-exports it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Final, NoReturn

from client.common import decline
from client.core import Triplet
from client.handle import Handle
from proto.attrs import EpAttr
from proto.constants import (
    TIMEOUT_INFINITE,
    CloseFlags,
    CompletionFlags,
    Dtos,
    EpState,
    HandleType,
)

if TYPE_CHECKING:
    from client.handles import Pz
    from client.handles_evd import Evd

# the posts' kinds as module constants: reading an enum class's attribute costs ~140 ns on
# CPython 3.11 (the daemon drops that hook, fabricd.runtime; a library leaves its host's alone)
_SEND: Final = Dtos.SEND
_RECEIVE: Final = Dtos.RECEIVE
_RDMA_WRITE: Final = Dtos.RDMA_WRITE
_RDMA_READ: Final = Dtos.RDMA_READ
_EXTENDED: Final = Dtos.IB_RDMA_WRITE_IMMED  # this and later kinds: dat_ib_post_*


class Ep(Handle):
    """An endpoint."""

    TYPE = HandleType.EP

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

    def dup_connect(
        self,
        dup_ep: Ep,
        timeout: int = TIMEOUT_INFINITE,
        private_data: bytes = b"",
    ) -> None:
        """dat_ep_dup_connect: to the remote address and conn_qual the CONNECTED ``dup_ep``
        connected to."""
        self.ia.run(self.ia.core.ep_dup_connect(self.handle, dup_ep.handle, timeout, private_data))

    def common_connect(self, *args: Any) -> NoReturn:
        """dat_ep_common_connect: declined (DAT_MODEL_NOT_SUPPORTED: no CSP to connect to)."""
        decline("dat_ep_common_connect")

    def recv_query(self) -> tuple[int, int]:
        """dat_ep_recv_query: (nbufs_allocated, bufs_alloc_span), the receives posted and not
        completed (without an SRQ the span is that count)."""
        self.ia._pump(0)
        return self.ia.core.ep_recv_query(self.handle)

    def set_watermark(self, soft_high_watermark: int, hard_high_watermark: int) -> None:
        """dat_ep_set_watermark (WATERMARK_INFINITE: none): past the soft one the async EVD
        gets ASYNC_ERROR_EP_BROKEN with reason SRQ_SOFT_HIGH_WATERMARK_EVENT, once per
        setting; past the hard one the connection breaks."""
        self.ia.run(
            self.ia.core.ep_set_watermark(self.handle, soft_high_watermark, hard_high_watermark)
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
        rung: bool | None = None,
    ) -> None:
        """What the common post (``core.plain``) left to do: ``rung``, the doorbell of the WQE
        it wrote; None, the whole post (it declined: the checks name the error; the IB
        extensions)."""
        core = self.ia.core
        if rung:
            self.ia._send(core.doorbell(self.handle))
            return
        post = core.post_extended if kind >= _EXTENDED else core.post
        doorbell = post(kind, self.handle, local_iov, cookie, remote, flags, operands)
        if doorbell:
            self.ia._send(doorbell)

    def post_send(
        self, local_iov: Sequence[Triplet], cookie: int = 0, flags: int = CompletionFlags.DEFAULT
    ) -> None:
        """dat_ep_post_send."""
        rung = self.ia.core.plain[_SEND](self.handle, local_iov, cookie, None, flags)
        if rung is not False:  # a doorbell due, or declined
            self._post(_SEND, local_iov, cookie, None, flags, rung=rung)

    def post_recv(
        self, local_iov: Sequence[Triplet], cookie: int = 0, flags: int = CompletionFlags.DEFAULT
    ) -> None:
        """dat_ep_post_recv."""
        rung = self.ia.core.plain[_RECEIVE](self.handle, local_iov, cookie, None, flags)
        if rung is not False:  # a doorbell due, or declined
            self._post(_RECEIVE, local_iov, cookie, None, flags, rung=rung)

    def post_rdma_write(
        self,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ep_post_rdma_write."""
        rung = self.ia.core.plain[_RDMA_WRITE](self.handle, local_iov, cookie, remote, flags)
        if rung is not False:  # a doorbell due, or declined
            self._post(_RDMA_WRITE, local_iov, cookie, remote, flags, rung=rung)

    def post_rdma_read(
        self,
        local_iov: Sequence[Triplet],
        cookie: int,
        remote: Triplet,
        flags: int = CompletionFlags.DEFAULT,
    ) -> None:
        """dat_ep_post_rdma_read."""
        rung = self.ia.core.plain[_RDMA_READ](self.handle, local_iov, cookie, remote, flags)
        if rung is not False:  # a doorbell due, or declined
            self._post(_RDMA_READ, local_iov, cookie, remote, flags, rung=rung)

    def post_send_with_invalidate(self, *args: Any) -> NoReturn:
        """dat_ep_post_send_with_invalidate: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_ep_post_send_with_invalidate")

    def post_rdma_read_to_rmr(self, *args: Any) -> NoReturn:
        """dat_ep_post_rdma_read_to_rmr: declined (DAT_MODEL_NOT_SUPPORTED)."""
        decline("dat_ep_post_rdma_read_to_rmr")

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
