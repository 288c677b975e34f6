"""The consumer core's connection calls (client.core.ClientCore is a ConnectionCalls): connect,
dup_connect, disconnect and reset of an EP, its receive queries and watermarks, PSPs and RSPs,
and the answers to a connection request (accept, reject, handoff), as operations that ask the
daemon (generators the APIs drive)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from client.records import Call as Call
from client.records import CrInfo, EpMirror, EvdState
from client.records import Op as Op
from proto import calls, ep_states
from proto.checks import is_int
from proto.constants import (
    TIMEOUT_INFINITE,
    WATERMARK_INFINITE,
    CloseFlags,
    DatReturnSubtype,
    EpState,
)
from proto.errors import DatConnQualInUse, DatInvalidHandle, DatInvalidParameter
from proto.limits import MAX_PRIVATE_DATA

Sub = DatReturnSubtype

ANY_QUALS: Final = 0x8000
"""dat_psp_create_any tries the upper half of the 16-bit conn_quals, from a random start."""


@dataclass(frozen=True, slots=True)
class SpInfo:
    """A PSP or RSP as dat_psp_query / dat_rsp_query answer: conn_qual, EVD, flags, its EP."""

    handle: int
    conn_qual: int
    evd: int
    flags: int = 0
    ep: int = 0


class ConnectionCalls:
    """Everything of ClientCore that makes or answers connections; the state it shares with
    the rest of the core is declared here and set up by ClientCore.__init__."""

    eps: dict[int, EpMirror]
    crs: dict[int, CrInfo]
    sps: dict[int, SpInfo]

    ep_mirror: Callable[[Any], EpMirror]  # ClientCore's
    evd: Callable[[Any], EvdState]  # EventPath's
    _forget: Callable[[int], None]  # ClientCore's

    def ep_connect(
        self,
        handle: int,
        remote_addr: Any,
        conn_qual: int,
        timeout: int,
        private_data: bytes,
    ) -> Op:
        """dat_ep_connect: the outcome arrives on the connect EVD."""
        ep = self.ep_mirror(handle)
        host, port = parse_address(remote_addr)
        if not is_int(timeout) or timeout <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "timeout must be positive")
        if len(private_data) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(Sub.INVALID_ARG6, "private data too long")
        if ep.state != EpState.UNCONNECTED:
            raise ep_states.state_error(ep.state, "dat_ep_connect")
        timeout = min(timeout, TIMEOUT_INFINITE)
        args = calls.EpConnect(handle, host, port, conn_qual, timeout, bytes(private_data))
        yield Call("ep_connect", args)

    def ep_dup_connect(self, handle: int, dup: int, timeout: int, private_data: bytes) -> Op:
        """dat_ep_dup_connect: connect to the remote address and conn_qual the CONNECTED
        ``dup`` EP connected to (the daemon knows them)."""
        ep = self.ep_mirror(handle)
        self.ep_mirror(dup)
        if not is_int(timeout) or timeout <= 0:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "timeout must be positive")
        if len(private_data) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(Sub.INVALID_ARG5, "private data too long")
        if ep.state != EpState.UNCONNECTED:
            raise ep_states.state_error(ep.state, "dat_ep_dup_connect")
        timeout = min(timeout, TIMEOUT_INFINITE)
        yield Call("ep_dup_connect", calls.EpDupConnect(handle, dup, timeout, bytes(private_data)))

    def ep_disconnect(self, handle: int, flags: int) -> Op:
        """dat_ep_disconnect."""
        ep = self.ep_mirror(handle)
        if flags not in (CloseFlags.ABRUPT, CloseFlags.GRACEFUL):
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad close flags {flags!r}")
        if ep.state in (
            EpState.UNCONNECTED,
            EpState.RESERVED,
            EpState.PASSIVE_CONNECTION_PENDING,
            EpState.TENTATIVE_CONNECTION_PENDING,
        ):
            raise ep_states.state_error(ep.state, "dat_ep_disconnect")
        yield Call("ep_disconnect", calls.EpDisconnect(handle, int(flags)))

    def ep_reset(self, handle: int) -> Op:
        """dat_ep_reset: back to UNCONNECTED so the EP can connect again."""
        self.ep_mirror(handle)
        yield Call("ep_reset", calls.EpHandle(handle))

    def ep_recv_query(self, handle: int) -> tuple[int, int]:
        """dat_ep_recv_query: (nbufs_allocated, bufs_alloc_span). An EP without an SRQ has
        every receive it posted allocated, in posting order, so the span is the count; an EP
        of an SRQ holds none between messages (it takes a receive as a message lands in it,
        and completes it with the message), so both are 0 (its own queue stays empty)."""
        held = self.ep_mirror(handle).recvs
        return held, held

    def ep_set_watermark(self, handle: int, soft: int, hard: int) -> Op:
        """dat_ep_set_watermark: the soft and hard high watermarks of the EP's receive buffers
        (DAT_WATERMARK_INFINITE: none); the daemon watches them."""
        self.ep_mirror(handle)
        for value, sub in ((soft, Sub.INVALID_ARG2), (hard, Sub.INVALID_ARG3)):
            if not is_int(value) or value < WATERMARK_INFINITE:
                raise DatInvalidParameter(sub, f"bad high watermark {value!r}")
        yield Call("ep_set_watermark", calls.EpSetWatermark(handle, soft, hard))

    def psp_create(self, conn_qual: int, evd: int, flags: int) -> Op:
        """dat_psp_create."""
        backlog = self.evd(evd).qlen  # the EVD's length is the backlog
        (psp,) = yield Call("psp_create", calls.PspCreate(conn_qual, evd, int(flags), backlog))
        self.sps[psp] = SpInfo(psp, conn_qual, evd, int(flags))
        return psp

    def psp_create_any(self, evd: int, flags: int, start: int) -> Op:
        """dat_psp_create_any: (psp, conn_qual), a conn_qual nobody on the node listens on,
        tried from ``start`` (the API's random pick) up through the upper half of 16 bits."""
        for i in range(ANY_QUALS):
            conn_qual = ANY_QUALS + (start + i) % ANY_QUALS
            try:
                psp = yield from self.psp_create(conn_qual, evd, flags)
            except DatConnQualInUse:
                continue
            return psp, conn_qual
        raise DatConnQualInUse(message="every conn_qual of the range has a listener")

    def psp_free(self, psp: int) -> Op:
        """dat_psp_free."""
        yield Call("psp_free", calls.PspFree(psp))
        self.sps.pop(psp, None)

    def rsp_create(self, conn_qual: int, ep: int, evd: int) -> Op:
        """dat_rsp_create: the EP becomes RESERVED."""
        self.ep_mirror(ep)
        self.evd(evd)
        rsp, _, _ = yield Call("rsp_create", calls.RspCreate(conn_qual, ep, evd))
        self.sps[rsp] = SpInfo(rsp, conn_qual, evd, ep=ep)
        return rsp

    def rsp_free(self, rsp: int) -> Op:
        """dat_rsp_free."""
        yield Call("rsp_free", calls.RspFree(rsp))
        self.sps.pop(rsp, None)

    def sp_query(self, handle: int, rsp: bool) -> SpInfo:
        """dat_psp_query / dat_rsp_query: what the service point was created with."""
        info = self.sps.get(handle)
        if info is None or (info.ep != 0) != rsp:
            sub = Sub.INVALID_HANDLE_RSP if rsp else Sub.INVALID_HANDLE_PSP
            raise DatInvalidHandle(sub, f"no {'RSP' if rsp else 'PSP'} {handle!r}")
        return info

    def cr_accept(self, cr: int, ep: int | None, private_data: bytes) -> Op:
        """dat_cr_accept: ESTABLISHED (or ACCEPT_COMPLETION_ERROR) follows on the connect EVD."""
        self.cr_info(cr)
        if len(private_data) > MAX_PRIVATE_DATA:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "private data too long")
        yield Call("cr_accept", calls.CrAccept(cr, ep or 0, bytes(private_data)))
        self.crs.pop(cr, None)

    def cr_reject(self, cr: int, private_data: bytes) -> Op:
        """dat_cr_reject (2.0: with private data for the active side's PEER_REJECTED)."""
        info = self.cr_info(cr)
        yield Call("cr_reject", calls.CrReject(cr, bytes(private_data)))
        self._cr_gone(info)

    def cr_handoff(self, cr: int, conn_qual: int) -> Op:
        """dat_cr_handoff: the request goes to the listener of ``conn_qual`` on this node; the
        CR is destroyed here (an EP it carried goes back as on dat_cr_reject)."""
        info = self.cr_info(cr)
        if not is_int(conn_qual) or conn_qual < 0:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad conn_qual {conn_qual!r}")
        yield Call("cr_handoff", calls.CrHandoff(cr, conn_qual))
        self._cr_gone(info)

    def cr_info(self, cr: Any) -> CrInfo:
        """A connection request by handle, or DAT_INVALID_HANDLE."""
        info = self.crs.get(cr) if type(cr) is int else None
        if info is None:
            raise DatInvalidHandle(Sub.INVALID_HANDLE_CR, f"no connection request {cr!r}")
        return info

    def _cr_gone(self, info: CrInfo) -> None:
        """A CR rejected or handed off: an EP the provider made for it is gone too."""
        self.crs.pop(info.handle, None)
        mirror = self.eps.get(info.ep)
        if mirror is not None and mirror.state == EpState.TENTATIVE_CONNECTION_PENDING:
            self._forget(info.ep)  # the provider freed the EP it had made


def parse_address(addr: Any) -> tuple[str, int]:
    """An IA address: ``(host, port)`` or ``"host:port"`` (DAT_IA_ADDRESS_PTR)."""
    if isinstance(addr, str):
        host, _, port = addr.rpartition(":")
        if host and port.isdigit():
            return host, int(port)
    elif isinstance(addr, tuple) and len(addr) == 2:
        host, port = addr
        if isinstance(host, str) and type(port) is int and 0 < port < 65536:
            return host, port
    raise DatInvalidParameter(Sub.INVALID_ARG2, f"bad remote address {addr!r}")
