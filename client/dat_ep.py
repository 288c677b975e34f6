"""The flat DAT layer's EP calls: dat_ep_* (the four posts included), PSP, RSP and CR, in the C
argument order, returning the DAT_RETURN (client.dat re-exports them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.api import Cr, Ep, Evd, Ia, Psp, Pz, Rsp
from client.core import CrInfo, Triplet
from client.datref import Ref, iov, need, put, status
from proto.attrs import EpAttr
from proto.constants import (
    DatReturnSubtype,
    Dtos,
    Qos,
)
from proto.errors import (
    DatInvalidParameter,
    DatModelNotSupported,
)

Sub = DatReturnSubtype


# -- EP ----------------------------------------------------------------------------------------


def dat_ep_create(
    ia: Ia,
    pz: Pz,
    recv_evd: Evd | None,
    request_evd: Evd | None,
    connect_evd: Evd | None,
    ep_attr: EpAttr | None,
    ep: Ref[Ep],
) -> int:
    """dat_ep_create (``ep_attr`` None: the provider defaults)."""

    def run() -> None:
        ep.value = need(ia, Ia, Sub.INVALID_HANDLE_IA).ep_create(
            need(pz, Pz, Sub.INVALID_HANDLE_PZ), recv_evd, request_evd, connect_evd, ep_attr
        )

    return status(run)


def dat_ep_free(ep: Ep) -> int:
    """dat_ep_free."""
    return status(lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).free())


def dat_ep_query(ep: Ep, ep_param_mask: int, ep_param: Ref[dict[str, Any]]) -> int:
    """dat_ep_query (the whole DAT_EP_PARAM, whatever the mask)."""
    return status(lambda: put(ep_param, need(ep, Ep, Sub.INVALID_HANDLE_EP).query()))


def dat_ep_get_status(
    ep: Ep, ep_state: Ref[int], recv_idle: Ref[bool] | None, request_idle: Ref[bool] | None
) -> int:
    """dat_ep_get_status."""

    def run() -> None:
        state, r_idle, q_idle = need(ep, Ep, Sub.INVALID_HANDLE_EP).get_status()
        ep_state.value = state
        put(recv_idle, r_idle)
        put(request_idle, q_idle)

    return status(run)


def dat_ep_connect(
    ep: Ep,
    remote_ia_address: Any,
    remote_conn_qual: int,
    timeout: int,
    private_data_size: int,
    private_data: bytes | None,
    qos: int,
    connect_flags: int,
) -> int:
    """dat_ep_connect."""

    def run() -> None:
        if qos != Qos.BEST_EFFORT or connect_flags != 0:
            raise DatModelNotSupported(message="only best-effort QoS and default flags")
        pdata = (private_data or b"")[:private_data_size]
        if len(pdata) != private_data_size:
            raise DatInvalidParameter(Sub.INVALID_ARG5, "private_data shorter than its size")
        need(ep, Ep, Sub.INVALID_HANDLE_EP).connect(
            remote_ia_address, remote_conn_qual, timeout, pdata
        )

    return status(run)


def dat_ep_disconnect(ep: Ep, disconnect_flags: int) -> int:
    """dat_ep_disconnect."""
    return status(lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).disconnect(disconnect_flags))


def dat_ep_reset(ep: Ep) -> int:
    """dat_ep_reset."""
    return status(lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).reset())


def _post(
    ep: Ep,
    kind: Dtos,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    remote_iov: Triplet | None,
    completion_flags: int,
    operands: tuple[int, int] = (0, 0),
) -> int:
    def run() -> None:
        target = need(ep, Ep, Sub.INVALID_HANDLE_EP)
        local = iov(num_segments, local_iov)
        target._post(kind, local, user_cookie, remote_iov, completion_flags, operands)

    return status(run)


def dat_ep_post_send(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    completion_flags: int,
) -> int:
    """dat_ep_post_send."""
    return _post(ep, Dtos.SEND, num_segments, local_iov, user_cookie, None, completion_flags)


def dat_ep_post_recv(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    completion_flags: int,
) -> int:
    """dat_ep_post_recv."""
    return _post(ep, Dtos.RECEIVE, num_segments, local_iov, user_cookie, None, completion_flags)


def dat_ep_post_rdma_write(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    remote_iov: Triplet,
    completion_flags: int,
) -> int:
    """dat_ep_post_rdma_write."""
    return _post(
        ep, Dtos.RDMA_WRITE, num_segments, local_iov, user_cookie, remote_iov, completion_flags
    )


def dat_ep_post_rdma_read(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    remote_iov: Triplet,
    completion_flags: int,
) -> int:
    """dat_ep_post_rdma_read."""
    return _post(
        ep, Dtos.RDMA_READ, num_segments, local_iov, user_cookie, remote_iov, completion_flags
    )


def dat_ib_post_fetch_and_add(
    ep: Ep,
    add_value: int,
    local_iov: Triplet,
    user_cookie: int,
    remote_iov: Triplet,
    completion_flags: int,
) -> int:
    """dat_ib_post_fetch_and_add (dat_ib_extensions.h): ``local_iov`` is one triplet."""
    local = [local_iov]  # None: refused as a triplet, the argument named
    operands = (add_value, 0)
    return _post(
        ep, Dtos.IB_FETCH_ADD, 1, local, user_cookie, remote_iov, completion_flags, operands
    )


def dat_ib_post_cmp_and_swap(
    ep: Ep,
    compare_value: int,
    swap_value: int,
    local_iov: Triplet,
    user_cookie: int,
    remote_iov: Triplet,
    completion_flags: int,
) -> int:
    """dat_ib_post_cmp_and_swap (dat_ib_extensions.h): ``local_iov`` is one triplet."""
    local = [local_iov]  # None: refused as a triplet, the argument named
    operands = (swap_value, compare_value)
    return _post(
        ep, Dtos.IB_CMP_SWAP, 1, local, user_cookie, remote_iov, completion_flags, operands
    )


def dat_ib_post_rdma_write_immed(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    remote_iov: Triplet,
    immed_data: int,
    completion_flags: int,
) -> int:
    """dat_ib_post_rdma_write_immed (dat_ib_extensions.h)."""
    kind, operands = Dtos.IB_RDMA_WRITE_IMMED, (immed_data, 0)
    return _post(
        ep, kind, num_segments, local_iov, user_cookie, remote_iov, completion_flags, operands
    )


# -- PSP, RSP, CR ------------------------------------------------------------------------------


def dat_psp_create(ia: Ia, conn_qual: int, evd: Evd, psp_flags: int, psp: Ref[Psp]) -> int:
    """dat_psp_create."""
    return status(
        lambda: put(
            psp,
            need(ia, Ia, Sub.INVALID_HANDLE_IA).psp_create(
                conn_qual, need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR), psp_flags
            ),
        )
    )


def dat_psp_free(psp: Psp) -> int:
    """dat_psp_free."""
    return status(lambda: need(psp, Psp, Sub.INVALID_HANDLE_PSP).free())


def dat_rsp_create(ia: Ia, conn_qual: int, ep: Ep, evd: Evd, rsp: Ref[Rsp]) -> int:
    """dat_rsp_create."""
    return status(
        lambda: put(
            rsp,
            need(ia, Ia, Sub.INVALID_HANDLE_IA).rsp_create(
                conn_qual,
                need(ep, Ep, Sub.INVALID_HANDLE_EP),
                need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR),
            ),
        )
    )


def dat_rsp_free(rsp: Rsp) -> int:
    """dat_rsp_free."""
    return status(lambda: need(rsp, Rsp, Sub.INVALID_HANDLE_RSP).free())


def dat_cr_accept(cr: Cr, ep: Ep | None, private_data_size: int, private_data: bytes | None) -> int:
    """dat_cr_accept (``cr`` is the event's ``cr_handle``)."""
    return status(
        lambda: need(cr, Cr, Sub.INVALID_HANDLE_CR).accept(
            ep, (private_data or b"")[:private_data_size]
        )
    )


def dat_cr_query(cr: Cr, cr_param_mask: int, cr_param: Ref[CrInfo]) -> int:
    """dat_cr_query: remote address, conn_qual, private data."""
    return status(lambda: put(cr_param, need(cr, Cr, Sub.INVALID_HANDLE_CR).query()))


def dat_cr_reject(cr: Cr, private_data_size: int, private_data: bytes | None) -> int:
    """dat_cr_reject (2.0: with private data for the active side)."""
    return status(
        lambda: need(cr, Cr, Sub.INVALID_HANDLE_CR).reject(
            (private_data or b"")[:private_data_size]
        )
    )
