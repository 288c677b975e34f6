"""The exact DAT_RETURN of every failing call of the flat layer (client.dat), over real daemons.

A C consumer sees one u32: class | type | subtype. Each row below makes one ``dat_*`` call fail
and compares the whole number, not just DAT_GET_TYPE. Every ``dat_*`` function of client.dat
that can fail has at least one row. The expected codes follow one rule:

- the type is the RETURN VALUES entry of the call's page (spec/ or DAT_REFERENCE.md section 1);
- DAT_INVALID_PARAMETER carries DAT_INVALID_ARGn, n the position of the bad argument in the
  DAT 2.0 C signature (dat_rmr_bind(rmr, lmr, lmr_triplet, mem_privileges, va_type, ep_handle,
  user_cookie, completion_flags, rmr_context); dat_ep_post_send(ep, num_segments, local_iov,
  user_cookie, completion_flags); ...);
- DAT_INVALID_HANDLE carries the handle's kind (DAT_INVALID_HANDLE_IA, _EP, _PZ, ...; an EVD
  the call does not name by role is DAT_INVALID_HANDLE_EVD_REQUEST, as libdat does);
- DAT_INVALID_STATE carries the state (DAT_INVALID_STATE_EP_<state>, _PZ_IN_USE, ...);
- types dat_error.h gives no subtypes (LENGTH_ERROR, MODEL_NOT_SUPPORTED, QUEUE_EMPTY,
  TIMEOUT_EXPIRED, CONN_QUAL_IN_USE) carry DAT_NO_SUBTYPE.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from client.api import Cr, Ep, Evd, Ia, Rmr
from client.dat import (
    Ref,
    dat_cr_accept,
    dat_cr_query,
    dat_cr_reject,
    dat_ep_connect,
    dat_ep_create,
    dat_ep_create_with_srq,
    dat_ep_disconnect,
    dat_ep_free,
    dat_ep_get_status,
    dat_ep_post_rdma_read,
    dat_ep_post_rdma_write,
    dat_ep_post_recv,
    dat_ep_post_send,
    dat_ep_query,
    dat_ep_reset,
    dat_evd_create,
    dat_evd_dequeue,
    dat_evd_free,
    dat_evd_wait,
    dat_ia_close,
    dat_ia_open,
    dat_ia_query,
    dat_ib_post_cmp_and_swap,
    dat_ib_post_fetch_and_add,
    dat_ib_post_rdma_write_immed,
    dat_lmr_create,
    dat_lmr_free,
    dat_lmr_query,
    dat_lmr_sync_rdma_read,
    dat_lmr_sync_rdma_write,
    dat_psp_create,
    dat_psp_free,
    dat_pz_create,
    dat_pz_free,
    dat_rmr_bind,
    dat_rmr_create,
    dat_rmr_free,
    dat_rmr_query,
    dat_rsp_create,
    dat_rsp_free,
    dat_srq_create,
    dat_srq_free,
    dat_srq_post_recv,
    dat_srq_query,
    dat_srq_resize,
    dat_srq_set_lw,
    dat_strerror,
)
from fabricd.launch import Node
from proto.attrs import EpAttr
from proto.constants import (
    DAT_SUCCESS,
    CloseFlags,
    CompletionFlags,
    EvdFlags,
    MemPriv,
    MemType,
    Qos,
    VaType,
)
from proto.errors import (
    DatConnQualInUse,
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
    DatInvalidState,
    DatModelNotSupported,
    DatProviderNotFound,
    DatQueueEmpty,
    DatTimeoutExpired,
)
from tests.conformance.support import (
    QUALS,
    WAIT_US,
    E,
    Side,
    Sub,
    assert_code,
    connected,
)
from tests.integration.flows import wait_event

Nodes = tuple[Node, Node]
Call = Callable[[Side, Side, Nodes], int]
RW = MemPriv.REMOTE_READ | MemPriv.REMOTE_WRITE
BAD_EVD = 99_999  # a handle no EVD has


def wrong(handle: object) -> Any:
    """A handle of the wrong kind, passed where C would take another handle type."""
    return handle


@dataclass(frozen=True)
class Row:
    """One failing call and the code it must return."""

    name: str  # "dat_function: what is wrong"
    call: Call
    error: type[DatError]
    subtype: Sub

    def param(self) -> object:
        return pytest.param(self.call, self.error, self.subtype, id=self.name)


def _ep(side: Side) -> Ep:
    """A fresh UNCONNECTED endpoint of the side's IA and PZ."""
    return side.ia.ep_create(side.pz, side.recv_evd, side.request_evd, side.connect_evd)


def _request(a: Side, b: Side, nodes: Nodes) -> Cr:
    """A pending connection request at b (a PSP with the CONSUMER flag: it carries no EP)."""
    qual = next(QUALS)
    b.ia.psp_create(qual, b.connect_evd)
    evd = a.ia.evd_create(8)
    a.ia.ep_create(a.pz, evd, evd, evd).connect(nodes[1].address, qual, WAIT_US)
    cr: Cr = wait_event(b.connect_evd, E.CONNECTION_REQUEST_EVENT).cr_handle
    return cr


def _freed_evd(a: Side) -> Evd:
    evd = a.ia.evd_create(4)
    evd.free()
    return evd


def _freed_rmr(a: Side) -> Rmr:
    rmr = a.ia.rmr_create(a.pz)
    rmr.free()
    return rmr


def _closed_ia(nodes: Nodes) -> Ia:
    ia = Ia(nodes[0].socket)
    ia.close()
    return ia


def _ia_close_bad_flags(nodes: Nodes) -> int:
    ia = Ia(nodes[0].socket)
    try:
        return dat_ia_close(ia, 7)
    finally:
        ia.close()


def _lmr_create(a: Side, va_type: int = VaType.VA, pz: Any = None) -> int:
    outs: list[Ref[int]] = [Ref() for _ in range(4)]
    return dat_lmr_create(
        a.ia, MemType.VIRTUAL, a.buf.address, 64, pz or a.pz, MemPriv.ALL, va_type, Ref(), *outs
    )


def _rmr_bind(
    a: Side,
    rmr: Any = None,
    triplet: list[int] | None = None,
    va_type: int = VaType.VA,
    ep: Any = None,
) -> int:
    return dat_rmr_bind(
        rmr or a.ia.rmr_create(a.pz),
        a.lmr,
        triplet or a.lmr.triplet(0, 64),
        RW,
        va_type,
        ep or a.ep,
        1,
        0,
        Ref(),
    )


def _psp_twice(b: Side) -> int:
    qual = next(QUALS)
    b.ia.psp_create(qual, b.connect_evd)
    return dat_psp_create(b.ia, qual, b.connect_evd, 0, Ref())


def _psp_freed(b: Side) -> int:
    psp = b.ia.psp_create(next(QUALS), b.connect_evd)
    psp.free()
    return dat_psp_free(psp)


def _rsp_freed(b: Side) -> int:
    rsp = b.ia.rsp_create(next(QUALS), _ep(b), b.connect_evd)
    rsp.free()
    return dat_rsp_free(rsp)


def _ep_free_reserved(b: Side) -> int:
    ep = _ep(b)
    b.ia.rsp_create(next(QUALS), ep, b.connect_evd)
    return dat_ep_free(ep)


def _cr_reject_twice(a: Side, b: Side, nodes: Nodes) -> int:
    cr = _request(a, b, nodes)
    assert dat_cr_reject(cr, 0, None) == DAT_SUCCESS
    return dat_cr_reject(cr, 0, None)


def _iov(a: Side) -> list[list[int]]:
    """A valid one-segment local_iov."""
    return [a.lmr.triplet(0, 8)]


def _malformed(a: Side) -> list[int]:
    """A triplet whose segment_length is negative (not a DAT_VLEN)."""
    address, _, context = a.lmr.triplet(0, 8)
    return [address, -1, context]


ROWS: list[Row] = [
    # -- IA and helpers --------------------------------------------------------------------
    Row(
        "dat_ia_open: name of DAT_NAME_MAX_LENGTH bytes",
        lambda a, b, n: dat_ia_open("x" * 256, 8, Ref(), Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG1,
    ),
    Row(
        "dat_ia_open: async_evd neither NULL nor EXISTS",
        lambda a, b, n: dat_ia_open(n[0].socket, 8, Ref(7), Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_ia_open: no such provider",
        lambda a, b, n: dat_ia_open("/nonexistent/datfabric.sock", 8, Ref(), Ref()),
        DatProviderNotFound,
        Sub.NAME_NOT_REGISTERED,
    ),
    Row(
        "dat_ia_close: not an IA",
        lambda a, b, n: dat_ia_close(wrong(a.pz), CloseFlags.ABRUPT),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_ia_close: GRACEFUL with objects",
        lambda a, b, n: dat_ia_close(a.ia, CloseFlags.GRACEFUL),
        DatInvalidState,
        Sub.INVALID_STATE_IA_IN_USE,
    ),
    Row(
        "dat_ia_close: undefined close flags",
        lambda a, b, n: _ia_close_bad_flags(n),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_ia_query: not an IA",
        lambda a, b, n: dat_ia_query(wrong(a.pz), None, 0, None, 0, None),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_strerror: undefined subtype",
        lambda a, b, n: dat_strerror(0x8006FFFF, Ref(), Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG1,
    ),
    # -- PZ, LMR, RMR ------------------------------------------------------------------------
    Row(
        "dat_pz_create: closed IA",
        lambda a, b, n: dat_pz_create(_closed_ia(n), Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_pz_free: in use",
        lambda a, b, n: dat_pz_free(a.pz),
        DatInvalidState,
        Sub.INVALID_STATE_PZ_IN_USE,
    ),
    Row(
        "dat_pz_free: not a PZ",
        lambda a, b, n: dat_pz_free(wrong(a.lmr)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "dat_lmr_create: DAT_VA_TYPE_ZB",
        lambda a, b, n: _lmr_create(a, va_type=VaType.ZB),
        DatModelNotSupported,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_lmr_create: not a PZ",
        lambda a, b, n: _lmr_create(a, pz=wrong(a.ep)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "dat_lmr_query: not an LMR",
        lambda a, b, n: dat_lmr_query(wrong(a.pz), 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row(
        "dat_lmr_sync_rdma_read: not an IA",
        lambda a, b, n: dat_lmr_sync_rdma_read(wrong(a.pz), [], 0),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_lmr_sync_rdma_write: segment past its LMR",
        lambda a, b, n: dat_lmr_sync_rdma_write(a.ia, [a.lmr.triplet(4090, 8)], 1),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_lmr_sync_rdma_read: malformed triplet",
        lambda a, b, n: dat_lmr_sync_rdma_read(a.ia, [_malformed(a)], 1),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_lmr_free: not an LMR",
        lambda a, b, n: dat_lmr_free(wrong(a.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_LMR,
    ),
    Row(
        "dat_rmr_create: not a PZ",
        lambda a, b, n: dat_rmr_create(wrong(a.ia), Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "dat_rmr_bind: not an RMR",
        lambda a, b, n: _rmr_bind(a, rmr=wrong(a.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_RMR,
    ),
    Row(
        "dat_rmr_bind: not an EP",
        lambda a, b, n: _rmr_bind(a, ep=wrong(a.lmr)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_rmr_bind: DAT_VA_TYPE_ZB",
        lambda a, b, n: _rmr_bind(a, va_type=VaType.ZB),
        DatModelNotSupported,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_rmr_bind: malformed triplet",
        lambda a, b, n: _rmr_bind(a, triplet=_malformed(a)),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_rmr_query: not an RMR",
        lambda a, b, n: dat_rmr_query(wrong(a.lmr), 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_RMR,
    ),
    Row(
        "dat_rmr_free: freed",
        lambda a, b, n: dat_rmr_free(_freed_rmr(a)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_RMR,
    ),
    # -- EVD ---------------------------------------------------------------------------------
    Row(
        "dat_evd_create: not an IA",
        lambda a, b, n: dat_evd_create(wrong(a.pz), 8, None, EvdFlags.DEFAULT, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_evd_create: min_qlen 0",
        lambda a, b, n: dat_evd_create(a.ia, 0, None, EvdFlags.DEFAULT, Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_evd_create: undefined flags",
        lambda a, b, n: dat_evd_create(a.ia, 8, None, 0x4000, Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG4,
    ),
    Row(
        "dat_evd_wait: freed",
        lambda a, b, n: dat_evd_wait(_freed_evd(a), 1000, 1, Ref(), Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    Row(
        "dat_evd_wait: threshold 0",
        lambda a, b, n: dat_evd_wait(a.ia.evd_create(4), 1000, 0, Ref(), Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_evd_wait: timeout",
        lambda a, b, n: dat_evd_wait(a.ia.evd_create(4), 1000, 1, Ref(), Ref()),
        DatTimeoutExpired,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_evd_dequeue: empty",
        lambda a, b, n: dat_evd_dequeue(a.ia.evd_create(4), Ref()),
        DatQueueEmpty,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_evd_dequeue: freed",
        lambda a, b, n: dat_evd_dequeue(_freed_evd(a), Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    Row(
        "dat_evd_free: in use",
        lambda a, b, n: dat_evd_free(a.request_evd),
        DatInvalidState,
        Sub.INVALID_STATE_EVD_IN_USE,
    ),
    Row(
        "dat_evd_free: not an EVD",
        lambda a, b, n: dat_evd_free(wrong(a.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    # -- EP ----------------------------------------------------------------------------------
    Row(
        "dat_ep_create: not an IA",
        lambda a, b, n: dat_ep_create(wrong(a.pz), a.pz, None, None, None, None, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_ep_create: not a PZ",
        lambda a, b, n: dat_ep_create(a.ia, wrong(a.ia), None, None, None, None, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_PZ,
    ),
    Row(
        "dat_ep_create: bad recv_evd",
        lambda a, b, n: dat_ep_create(a.ia, a.pz, Evd(a.ia, BAD_EVD), None, None, None, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_RECV,
    ),
    Row(
        "dat_ep_create: bad request_evd",
        lambda a, b, n: dat_ep_create(a.ia, a.pz, None, Evd(a.ia, BAD_EVD), None, None, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_REQUEST,
    ),
    Row(
        "dat_ep_create: bad connect_evd",
        lambda a, b, n: dat_ep_create(a.ia, a.pz, None, None, Evd(a.ia, BAD_EVD), None, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_CONN,
    ),
    Row(
        "dat_ep_create: attribute past the provider's limit",
        lambda a, b, n: dat_ep_create(
            a.ia, a.pz, None, None, None, EpAttr(max_recv_dtos=1 << 40), Ref()
        ),
        DatInvalidParameter,
        Sub.INVALID_ARG6,
    ),
    Row(
        "dat_ep_free: not an EP",
        lambda a, b, n: dat_ep_free(wrong(a.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_free: RESERVED",
        lambda a, b, n: _ep_free_reserved(b),
        DatInvalidState,
        Sub.INVALID_STATE_EP_RESERVED,
    ),
    Row(
        "dat_ep_query: not an EP",
        lambda a, b, n: dat_ep_query(wrong(a.pz), 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_get_status: not an EP",
        lambda a, b, n: dat_ep_get_status(wrong(a.pz), Ref(), None, None),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_connect: CONNECTED",
        lambda a, b, n: dat_ep_connect(a.ep, n[1].address, 1, WAIT_US, 0, None, 0, 0),
        DatInvalidState,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "dat_ep_connect: malformed address",
        lambda a, b, n: dat_ep_connect(_ep(a), "nonsense", 1, WAIT_US, 0, None, 0, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_ep_connect: timeout 0",
        lambda a, b, n: dat_ep_connect(_ep(a), n[1].address, 1, 0, 0, None, 0, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG4,
    ),
    Row(
        "dat_ep_connect: private_data_size past the data",
        lambda a, b, n: dat_ep_connect(_ep(a), n[1].address, 1, WAIT_US, 5, b"ab", 0, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_connect: QoS other than best effort",
        lambda a, b, n: dat_ep_connect(
            _ep(a), n[1].address, 1, WAIT_US, 0, None, Qos.HIGH_THROUGHPUT, 0
        ),
        DatModelNotSupported,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_ep_disconnect: undefined flags",
        lambda a, b, n: dat_ep_disconnect(a.ep, 7),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_ep_disconnect: UNCONNECTED",
        lambda a, b, n: dat_ep_disconnect(_ep(a), CloseFlags.ABRUPT),
        DatInvalidState,
        Sub.INVALID_STATE_EP_UNCONNECTED,
    ),
    Row(
        "dat_ep_reset: CONNECTED",
        lambda a, b, n: dat_ep_reset(a.ep),
        DatInvalidState,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "dat_ep_reset: not an EP",
        lambda a, b, n: dat_ep_reset(wrong(a.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    # -- posts -------------------------------------------------------------------------------
    Row(
        "dat_ep_post_send: not an EP",
        lambda a, b, n: dat_ep_post_send(wrong(a.pz), 1, _iov(a), 1, 0),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_post_send: num_segments past local_iov",
        lambda a, b, n: dat_ep_post_send(a.ep, 2, _iov(a), 1, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    Row(
        "dat_ep_post_send: segment past its LMR",
        lambda a, b, n: dat_ep_post_send(a.ep, 1, [a.lmr.triplet(4090, 8)], 1, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_ep_post_send: malformed triplet",
        lambda a, b, n: dat_ep_post_send(a.ep, 1, [_malformed(a)], 1, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_ep_post_send: cookie not a u64",
        lambda a, b, n: dat_ep_post_send(a.ep, 1, _iov(a), -1, 0),
        DatInvalidParameter,
        Sub.INVALID_ARG4,
    ),
    Row(
        "dat_ep_post_send: undefined completion flags",
        lambda a, b, n: dat_ep_post_send(a.ep, 1, _iov(a), 1, 0x40),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_send: UNSIGNALLED the EP does not allow",
        lambda a, b, n: dat_ep_post_send(a.ep, 1, _iov(a), 1, CompletionFlags.UNSIGNALLED),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_recv: not an EP",
        lambda a, b, n: dat_ep_post_recv(wrong(a.pz), 1, _iov(a), 1, 0),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_post_recv: SUPPRESS",
        lambda a, b, n: dat_ep_post_recv(a.ep, 1, _iov(a), 1, CompletionFlags.SUPPRESS),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_recv: undefined completion flags",
        lambda a, b, n: dat_ep_post_recv(a.ep, 1, _iov(a), 1, 0x40),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_rdma_write: not an EP",
        lambda a, b, n: dat_ep_post_rdma_write(wrong(a.pz), 1, _iov(a), 1, b.lmr.remote(0, 8), 0),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ep_post_rdma_write: malformed local triplet",
        lambda a, b, n: dat_ep_post_rdma_write(a.ep, 1, [_malformed(a)], 1, b.lmr.remote(0, 8), 0),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_ep_post_rdma_write: malformed remote triplet",
        lambda a, b, n: dat_ep_post_rdma_write(a.ep, 1, _iov(a), 1, _malformed(b), 0),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_rdma_read: malformed remote triplet",
        lambda a, b, n: dat_ep_post_rdma_read(a.ep, 1, _iov(a), 1, _malformed(b), 0),
        DatInvalidParameter,
        Sub.INVALID_ARG5,
    ),
    Row(
        "dat_ep_post_rdma_read: num_segments past local_iov",
        lambda a, b, n: dat_ep_post_rdma_read(a.ep, 3, _iov(a), 1, b.lmr.remote(0, 8), 0),
        DatInvalidParameter,
        Sub.INVALID_ARG2,
    ),
    # -- PSP, RSP, CR ------------------------------------------------------------------------
    Row(
        "dat_psp_create: not an IA",
        lambda a, b, n: dat_psp_create(wrong(b.pz), next(QUALS), b.connect_evd, 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_IA,
    ),
    Row(
        "dat_psp_create: not an EVD",
        lambda a, b, n: dat_psp_create(b.ia, next(QUALS), wrong(b.pz), 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EVD_CR,
    ),
    Row(
        "dat_psp_create: undefined flags",
        lambda a, b, n: dat_psp_create(b.ia, next(QUALS), b.connect_evd, 5, Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG4,
    ),
    Row(
        "dat_psp_create: conn_qual in use",
        lambda a, b, n: _psp_twice(b),
        DatConnQualInUse,
        Sub.NO_SUBTYPE,
    ),
    Row(
        "dat_psp_free: freed",
        lambda a, b, n: _psp_freed(b),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_PSP,
    ),
    Row(
        "dat_rsp_create: CONNECTED EP",
        lambda a, b, n: dat_rsp_create(b.ia, next(QUALS), b.ep, b.connect_evd, Ref()),
        DatInvalidState,
        Sub.INVALID_STATE_EP_CONNECTED,
    ),
    Row(
        "dat_rsp_create: not an EP",
        lambda a, b, n: dat_rsp_create(b.ia, next(QUALS), wrong(b.pz), b.connect_evd, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_rsp_free: not an RSP",
        lambda a, b, n: dat_rsp_free(wrong(b.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_RSP,
    ),
    Row(
        "dat_rsp_free: freed",
        lambda a, b, n: _rsp_freed(b),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_RSP,
    ),
    Row(
        "dat_cr_accept: not a CR",
        lambda a, b, n: dat_cr_accept(wrong(b.pz), b.ep, 0, None),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_CR,
    ),
    Row(
        "dat_cr_accept: no EP for a CR that carries none",
        lambda a, b, n: dat_cr_accept(_request(a, b, n), None, 0, None),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_cr_query: unknown CR",
        lambda a, b, n: dat_cr_query(Cr(b.ia, 424_242), 0, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_CR,
    ),
    Row(
        "dat_cr_reject: already rejected",
        _cr_reject_twice,
        DatInvalidHandle,
        Sub.INVALID_HANDLE_CR,
    ),
    # -- IB extensions (their argument errors: test_dat_ib_extensions and tests/core) ------
    Row(
        "dat_ib_post_fetch_and_add: not an EP",
        lambda a, b, n: dat_ib_post_fetch_and_add(
            wrong(a.pz), 1, _iov(a)[0], 1, b.lmr.remote(0, 8), 0
        ),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_EP,
    ),
    Row(
        "dat_ib_post_cmp_and_swap: misaligned remote",
        lambda a, b, n: dat_ib_post_cmp_and_swap(a.ep, 0, 1, _iov(a)[0], 1, b.lmr.remote(4, 8), 0),
        DatInvalidParameter,
        Sub.INVALID_ARG6,
    ),
    Row(
        "dat_ib_post_rdma_write_immed: immediate past 32 bits",
        lambda a, b, n: dat_ib_post_rdma_write_immed(
            a.ep, 1, _iov(a), 1, b.lmr.remote(0, 8), 1 << 32, 0
        ),
        DatInvalidParameter,
        Sub.INVALID_ARG6,
    ),
    # -- SRQ (the rest of their codes: test_dat_srq) ----------------------------------------
    Row(
        "dat_srq_create: no attributes",
        lambda a, b, n: dat_srq_create(b.ia, b.pz, None, Ref()),
        DatInvalidParameter,
        Sub.INVALID_ARG3,
    ),
    Row(
        "dat_srq_free: not an SRQ",
        lambda a, b, n: dat_srq_free(wrong(b.pz)),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
    Row(
        "dat_srq_post_recv: not an SRQ",
        lambda a, b, n: dat_srq_post_recv(wrong(b.pz), 0, None, 1),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
    Row(
        "dat_srq_query: not an SRQ",
        lambda a, b, n: dat_srq_query(wrong(b.pz), 0xFF, Ref()),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
    Row(
        "dat_srq_resize: not an SRQ",
        lambda a, b, n: dat_srq_resize(wrong(b.pz), 4),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
    Row(
        "dat_srq_set_lw: not an SRQ",
        lambda a, b, n: dat_srq_set_lw(wrong(b.pz), 0),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
    Row(
        "dat_ep_create_with_srq: not an SRQ",
        lambda a, b, n: dat_ep_create_with_srq(
            b.ia, b.pz, b.recv_evd, b.request_evd, b.connect_evd, wrong(b.pz), None, Ref()
        ),
        DatInvalidHandle,
        Sub.INVALID_HANDLE_SRQ,
    ),
]


@pytest.mark.parametrize(("call", "error", "subtype"), [row.param() for row in ROWS])
def test_the_flat_layer_returns_the_exact_code(
    nodes: Nodes, call: Call, error: type[DatError], subtype: Sub
) -> None:
    """The call returns exactly DAT_ERROR(type, subtype), as a C consumer would compare it."""
    with connected(*nodes) as (a, b):
        assert_code(call(a, b, nodes), error, subtype)


def test_every_failing_flat_call_has_a_row() -> None:
    """Each dat_* function of client.dat appears in at least one row above (the test ids name
    the function), so a new call cannot go without an exact-code check."""
    import client.dat
    from tests.conformance.test_flat_codes_added import ROWS as ADDED

    functions = {name for name in dir(client.dat) if name.startswith("dat_")}
    covered = {row.name.split(":")[0] for row in [*ROWS, *ADDED]}
    # dat_ep_post_rdma_write, _read, dat_lmr_sync_*, dat_lmr_create and dat_rmr_bind also have
    # exact-code tests in their own modules
    assert functions - covered == set()
