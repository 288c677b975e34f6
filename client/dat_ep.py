"""The flat DAT layer's EP calls: dat_ep_* (the posts included, and the IB extensions'), in the
C argument order, returning the DAT_RETURN (client.dat re-exports them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.api import Ep, Evd, Ia, Pz
from client.common import decline
from client.core import Triplet
from client.datref import Ref, iov, need, out, put, query, status
from proto.attrs import EpAttr
from proto.constants import (
    DatReturnSubtype,
    Dtos,
    EpParamMask,
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
    ep: Ref[Ep] | None,
) -> int:
    """dat_ep_create (``ep_attr`` None: the provider defaults)."""

    def run() -> None:
        owner, zone = need(ia, Ia, Sub.INVALID_HANDLE_IA), need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        made = out(ep, Sub.INVALID_ARG7, "ep")
        made.value = owner.ep_create(zone, recv_evd, request_evd, connect_evd, ep_attr)

    return status(run)


def dat_ep_free(ep: Ep) -> int:
    """dat_ep_free."""
    return status(lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).free())


def dat_ep_query(ep: Ep, ep_param_mask: int, ep_param: Ref[dict[str, Any]] | None) -> int:
    """dat_ep_query (the whole DAT_EP_PARAM, whatever the mask)."""
    return query(lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).query(), ep_param)


_EVD_FIELDS = (
    (EpParamMask.RECV_EVD_HANDLE, "recv_evd"),
    (EpParamMask.REQUEST_EVD_HANDLE, "request_evd"),
    (EpParamMask.CONNECT_EVD_HANDLE, "connect_evd"),
)
_MODIFIABLE = EpParamMask.PZ_HANDLE | EpParamMask.EP_ATTR_ALL
for _bit, _ in _EVD_FIELDS:
    _MODIFIABLE |= _bit


def dat_ep_modify(ep: Ep, ep_param_mask: int, ep_param: dict[str, Any] | None) -> int:
    """dat_ep_modify: the fields ``ep_param_mask`` names take their values from ``ep_param``
    (dat_ep_query's keys: ``pz`` a Pz, the EVDs Evds or None, ``ep_attr`` an EpAttr)."""

    def run() -> None:
        target = need(ep, Ep, Sub.INVALID_HANDLE_EP)
        if not ep_param_mask or ep_param_mask & ~_MODIFIABLE:
            raise DatInvalidParameter(Sub.INVALID_ARG2, f"cannot modify {ep_param_mask:#x}")
        if ep_param is None:
            raise DatInvalidParameter(Sub.INVALID_ARG3, "ep_param is NULL")
        changes: dict[str, Any] = {}
        if ep_param_mask & EpParamMask.PZ_HANDLE:
            changes["pz"] = need(ep_param.get("pz"), Pz, Sub.INVALID_HANDLE_PZ)
        for bit, name in _EVD_FIELDS:
            if ep_param_mask & bit and ep_param.get(name) is not None:
                changes[name] = need(ep_param[name], Evd, Sub.INVALID_HANDLE_EVD_CONN)
        if ep_param_mask & EpParamMask.EP_ATTR_ALL:
            attr = ep_param.get("ep_attr")
            if not isinstance(attr, EpAttr):
                raise DatInvalidParameter(Sub.INVALID_ARG3, "ep_attr must be an EpAttr")
            changes["attr"] = attr
        target.modify(**changes)

    return status(run)


def dat_ep_get_status(
    ep: Ep, ep_state: Ref[int] | None, recv_idle: Ref[bool] | None, request_idle: Ref[bool] | None
) -> int:
    """dat_ep_get_status (the idle flags only into the out-parameters given)."""

    def run() -> None:
        state, r_idle, q_idle = need(ep, Ep, Sub.INVALID_HANDLE_EP).get_status()
        out(ep_state, Sub.INVALID_ARG2, "ep_state").value = state
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


def dat_ep_dup_connect(
    ep: Ep,
    dup_ep: Ep,
    timeout: int,
    private_data_size: int,
    private_data: bytes | None,
    qos: int,
) -> int:
    """dat_ep_dup_connect: to the remote address and conn_qual ``dup_ep`` connected to."""

    def run() -> None:
        target = need(ep, Ep, Sub.INVALID_HANDLE_EP)
        dup = need(dup_ep, Ep, Sub.INVALID_HANDLE_EP)
        if qos != Qos.BEST_EFFORT:
            raise DatModelNotSupported(message="only best-effort QoS")
        pdata = (private_data or b"")[: max(private_data_size, 0)]
        if private_data_size < 0 or len(pdata) != private_data_size:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "private_data shorter than its size")
        target.dup_connect(dup, timeout, pdata)

    return status(run)


def dat_ep_common_connect(
    ep: Ep,
    remote_ia_address: Any,
    timeout: int,
    private_data_size: int,
    private_data: bytes | None,
) -> int:
    """dat_ep_common_connect: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_ep_common_connect"))


def dat_ep_recv_query(
    ep: Ep, nbufs_allocated: Ref[int] | None, bufs_alloc_span: Ref[int] | None
) -> int:
    """dat_ep_recv_query: receives posted and not completed, and their span (the same count:
    without an SRQ every posted buffer is allocated, in order)."""

    def run() -> None:
        nbufs, span = need(ep, Ep, Sub.INVALID_HANDLE_EP).recv_query()
        put(nbufs_allocated, nbufs)
        put(bufs_alloc_span, span)

    return status(run)


def dat_ep_set_watermark(ep: Ep, soft_high_watermark: int, hard_high_watermark: int) -> int:
    """dat_ep_set_watermark (DAT_WATERMARK_INFINITE: none)."""
    return status(
        lambda: need(ep, Ep, Sub.INVALID_HANDLE_EP).set_watermark(
            soft_high_watermark, hard_high_watermark
        )
    )


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


def dat_ep_post_send_with_invalidate(
    ep: Ep,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    completion_flags: int,
    invalidate_flag: bool,
    rmr_context: int,
) -> int:
    """dat_ep_post_send_with_invalidate: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_ep_post_send_with_invalidate"))


def dat_ep_post_rdma_read_to_rmr(
    ep: Ep,
    local_iov: Triplet,
    user_cookie: int,
    remote_iov: Triplet,
    completion_flags: int,
) -> int:
    """dat_ep_post_rdma_read_to_rmr: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_ep_post_rdma_read_to_rmr"))


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
