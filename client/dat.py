"""The flat DAT layer: ``dat_*`` functions in the C argument order, returning the DAT_RETURN.

For C code ported line by line: out-parameters are ``Ref`` objects (``ia = Ref(); ret =
dat_ia_open("datfabric", 8, Ref(), ia)``) and a failure is the numeric DAT_RETURN, never an
exception. Handles are the objects of client.api.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

from client.api import Cr, Ep, Evd, Ia, Lmr, Psp, Pz, Rmr, Rsp
from client.core import CrInfo, Event, LmrInfo, Triplet
from proto.attrs import EpAttr
from proto.constants import (
    DAT_SUCCESS,
    EVD_ASYNC_EXISTS,
    DatReturnSubtype,
    Dtos,
    MemType,
    Qos,
)
from proto.errors import (
    DatError,
    DatInvalidHandle,
    DatInvalidParameter,
    DatModelNotSupported,
)
from proto.errors import (
    dat_strerror as _strerror,
)

T = TypeVar("T")
Sub = DatReturnSubtype


class Ref(Generic[T]):
    """An out-parameter: the call stores its result in ``value``."""

    def __init__(self, value: T | None = None) -> None:
        self.value = value

    def __repr__(self) -> str:
        return f"Ref({self.value!r})"


def _status(fn: Callable[[], None]) -> int:
    try:
        fn()
    except DatError as err:
        return err.code
    return DAT_SUCCESS


def _need(handle: Any, cls: type[Any], sub: DatReturnSubtype) -> Any:
    if not isinstance(handle, cls):
        raise DatInvalidHandle(sub, f"not a {cls.__name__} handle: {handle!r}")
    return handle


def _set(ref: Ref[Any] | None, value: Any) -> None:
    if ref is not None:
        ref.value = value


# -- IA ----------------------------------------------------------------------------------------


def dat_ia_open(name: str, async_evd_qlen: int, async_evd: Ref[Any], ia: Ref[Ia]) -> int:
    """dat_ia_open: ``async_evd.value`` None creates the async EVD (EVD_ASYNC_EXISTS reuses)."""

    def run() -> None:
        if async_evd.value not in (None, EVD_ASYNC_EXISTS):
            raise DatInvalidParameter(Sub.INVALID_ARG3, "async_evd must be NULL or EXISTS")
        opened = Ia(name, async_evd_qlen)
        ia.value = opened
        async_evd.value = opened.async_evd

    return _status(run)


def dat_ia_close(ia: Ia, flags: int) -> int:
    """dat_ia_close."""
    return _status(lambda: _need(ia, Ia, Sub.INVALID_HANDLE_IA).close(flags))


def dat_ia_query(
    ia: Ia,
    async_evd: Ref[Evd] | None,
    ia_mask: int,
    ia_attr: Ref[dict[str, Any]] | None,
    pr_mask: int,
    pr_attr: Ref[dict[str, Any]] | None,
) -> int:
    """dat_ia_query: IA and provider attributes (as mappings)."""

    def run() -> None:
        attrs = _need(ia, Ia, Sub.INVALID_HANDLE_IA).query()
        _set(async_evd, ia.async_evd)
        _set(ia_attr, attrs)
        _set(
            pr_attr,
            {
                "provider_name": "datfabric",
                "lmr_sync_req": attrs["lmr_sync_req"],
                "max_private_data_size": attrs["max_private_data_size"],
            },
        )

    return _status(run)


def dat_strerror(value: int, major: Ref[str], minor: Ref[str]) -> int:
    """dat_strerror: the names of a return code's type and subtype."""

    def run() -> None:
        major.value, minor.value = _strerror(value)

    return _status(run)


# -- PZ, LMR -----------------------------------------------------------------------------------


def dat_pz_create(ia: Ia, pz: Ref[Pz]) -> int:
    """dat_pz_create."""
    return _status(lambda: _set(pz, _need(ia, Ia, Sub.INVALID_HANDLE_IA).pz_create()))


def dat_pz_free(pz: Pz) -> int:
    """dat_pz_free."""
    return _status(lambda: _need(pz, Pz, Sub.INVALID_HANDLE_PZ).free())


def dat_lmr_create(
    ia: Ia,
    mem_type: int,
    region_description: Any,
    length: int,
    pz: Pz,
    privileges: int,
    va_type: int,
    lmr: Ref[Lmr],
    lmr_context: Ref[int],
    rmr_context: Ref[int],
    registered_size: Ref[int],
    registered_address: Ref[int],
) -> int:
    """dat_lmr_create (2.0 order: va_type after privileges; only DAT_VA_TYPE_VA)."""

    def run() -> None:
        if va_type != 0:
            raise DatModelNotSupported(message="zero-based virtual addresses are not offered")
        region = region_description
        if mem_type == MemType.LMR:
            region = _need(region_description, Lmr, Sub.INVALID_HANDLE_LMR).handle
        made = _need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_create(
            mem_type, region, length, _need(pz, Pz, Sub.INVALID_HANDLE_PZ), privileges
        )
        lmr.value = made
        _set(lmr_context, made.lmr_context)
        _set(rmr_context, made.rmr_context)
        _set(registered_size, made.registered_size)
        _set(registered_address, made.registered_address)

    return _status(run)


def dat_lmr_query(lmr: Lmr, lmr_param_mask: int, lmr_param: Ref[LmrInfo]) -> int:
    """dat_lmr_query (the whole DAT_LMR_PARAM, whatever the mask)."""
    return _status(lambda: _set(lmr_param, _need(lmr, Lmr, Sub.INVALID_HANDLE_LMR).query()))


def dat_lmr_sync_rdma_read(ia: Ia, local_segments: Sequence[Triplet], num_segments: int) -> int:
    """dat_lmr_sync_rdma_read."""
    return _status(
        lambda: _need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_sync_rdma_read(
            _iov(num_segments, local_segments, Sub.INVALID_ARG3)
        )
    )


def dat_lmr_sync_rdma_write(ia: Ia, local_segments: Sequence[Triplet], num_segments: int) -> int:
    """dat_lmr_sync_rdma_write."""
    return _status(
        lambda: _need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_sync_rdma_write(
            _iov(num_segments, local_segments, Sub.INVALID_ARG3)
        )
    )


def dat_lmr_free(lmr: Lmr) -> int:
    """dat_lmr_free."""
    return _status(lambda: _need(lmr, Lmr, Sub.INVALID_HANDLE_LMR).free())


def dat_rmr_create(pz: Pz, rmr: Ref[Rmr]) -> int:
    """dat_rmr_create."""

    def run() -> None:
        zone = _need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        rmr.value = zone.ia.rmr_create(zone)

    return _status(run)


def dat_rmr_bind(
    rmr: Rmr,
    lmr: Lmr | None,
    lmr_triplet: Triplet,
    mem_privileges: int,
    va_type: int,
    ep: Ep,
    user_cookie: int,
    completion_flags: int,
    rmr_context: Ref[int],
) -> int:
    """dat_rmr_bind (2.0 order: rmr, lmr, triplet, privileges, va_type, ep, ...)."""

    def run() -> None:
        if va_type != 0:
            raise DatModelNotSupported(message="zero-based virtual addresses are not offered")
        rmr_context.value = _need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).bind(
            lmr,
            lmr_triplet,
            mem_privileges,
            _need(ep, Ep, Sub.INVALID_HANDLE_EP),
            user_cookie,
            completion_flags,
        )

    return _status(run)


def dat_rmr_query(rmr: Rmr, rmr_param_mask: int, rmr_param: Ref[dict[str, Any]]) -> int:
    """dat_rmr_query."""
    return _status(lambda: _set(rmr_param, _need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).query()))


def dat_rmr_free(rmr: Rmr) -> int:
    """dat_rmr_free."""
    return _status(lambda: _need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).free())


# -- EVD ---------------------------------------------------------------------------------------


def dat_evd_create(ia: Ia, evd_min_qlen: int, cno: Any, evd_flags: int, evd: Ref[Evd]) -> int:
    """dat_evd_create (CNOs are not offered yet: ``cno`` must be None)."""

    def run() -> None:
        if cno is not None:
            raise DatModelNotSupported(message="CNOs are not offered yet")
        evd.value = _need(ia, Ia, Sub.INVALID_HANDLE_IA).evd_create(evd_min_qlen, evd_flags)

    return _status(run)


def dat_evd_wait(evd: Evd, timeout: int, threshold: int, event: Ref[Event], nmore: Ref[int]) -> int:
    """dat_evd_wait: on DAT_TIMEOUT_EXPIRED ``nmore`` is still set."""
    try:
        event.value, nmore.value = _need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).wait(
            timeout, threshold
        )
    except DatError as err:
        nmore.value = getattr(err, "nmore", nmore.value)
        return err.code
    return DAT_SUCCESS


def dat_evd_dequeue(evd: Evd, event: Ref[Event]) -> int:
    """dat_evd_dequeue."""
    return _status(lambda: _set(event, _need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).dequeue()))


def dat_evd_free(evd: Evd) -> int:
    """dat_evd_free."""
    return _status(lambda: _need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).free())


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
        ep.value = _need(ia, Ia, Sub.INVALID_HANDLE_IA).ep_create(
            _need(pz, Pz, Sub.INVALID_HANDLE_PZ), recv_evd, request_evd, connect_evd, ep_attr
        )

    return _status(run)


def dat_ep_free(ep: Ep) -> int:
    """dat_ep_free."""
    return _status(lambda: _need(ep, Ep, Sub.INVALID_HANDLE_EP).free())


def dat_ep_query(ep: Ep, ep_param_mask: int, ep_param: Ref[dict[str, Any]]) -> int:
    """dat_ep_query (the whole DAT_EP_PARAM, whatever the mask)."""
    return _status(lambda: _set(ep_param, _need(ep, Ep, Sub.INVALID_HANDLE_EP).query()))


def dat_ep_get_status(
    ep: Ep, ep_state: Ref[int], recv_idle: Ref[bool] | None, request_idle: Ref[bool] | None
) -> int:
    """dat_ep_get_status."""

    def run() -> None:
        state, r_idle, q_idle = _need(ep, Ep, Sub.INVALID_HANDLE_EP).get_status()
        ep_state.value = state
        _set(recv_idle, r_idle)
        _set(request_idle, q_idle)

    return _status(run)


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
        _need(ep, Ep, Sub.INVALID_HANDLE_EP).connect(
            remote_ia_address, remote_conn_qual, timeout, pdata
        )

    return _status(run)


def dat_ep_disconnect(ep: Ep, disconnect_flags: int) -> int:
    """dat_ep_disconnect."""
    return _status(lambda: _need(ep, Ep, Sub.INVALID_HANDLE_EP).disconnect(disconnect_flags))


def dat_ep_reset(ep: Ep) -> int:
    """dat_ep_reset."""
    return _status(lambda: _need(ep, Ep, Sub.INVALID_HANDLE_EP).reset())


def _iov(
    num_segments: int, local_iov: Sequence[Triplet] | None, arg: Sub = Sub.INVALID_ARG2
) -> Sequence[Triplet]:
    """The first ``num_segments`` triplets (``arg``: num_segments' position in the call)."""
    iov = local_iov or []
    if num_segments < 0 or num_segments > len(iov):
        raise DatInvalidParameter(arg, "num_segments does not match the triplets given")
    return iov[:num_segments]


def _post(
    ep: Ep,
    kind: Dtos,
    num_segments: int,
    local_iov: Sequence[Triplet] | None,
    user_cookie: int,
    remote_iov: Triplet | None,
    completion_flags: int,
) -> int:
    def run() -> None:
        target = _need(ep, Ep, Sub.INVALID_HANDLE_EP)
        target._post(kind, _iov(num_segments, local_iov), user_cookie, remote_iov, completion_flags)

    return _status(run)


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


# -- PSP, RSP, CR ------------------------------------------------------------------------------


def dat_psp_create(ia: Ia, conn_qual: int, evd: Evd, psp_flags: int, psp: Ref[Psp]) -> int:
    """dat_psp_create."""
    return _status(
        lambda: _set(
            psp,
            _need(ia, Ia, Sub.INVALID_HANDLE_IA).psp_create(
                conn_qual, _need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR), psp_flags
            ),
        )
    )


def dat_psp_free(psp: Psp) -> int:
    """dat_psp_free."""
    return _status(lambda: _need(psp, Psp, Sub.INVALID_HANDLE_PSP).free())


def dat_rsp_create(ia: Ia, conn_qual: int, ep: Ep, evd: Evd, rsp: Ref[Rsp]) -> int:
    """dat_rsp_create."""
    return _status(
        lambda: _set(
            rsp,
            _need(ia, Ia, Sub.INVALID_HANDLE_IA).rsp_create(
                conn_qual,
                _need(ep, Ep, Sub.INVALID_HANDLE_EP),
                _need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR),
            ),
        )
    )


def dat_rsp_free(rsp: Rsp) -> int:
    """dat_rsp_free."""
    return _status(lambda: _need(rsp, Rsp, Sub.INVALID_HANDLE_RSP).free())


def dat_cr_accept(cr: Cr, ep: Ep | None, private_data_size: int, private_data: bytes | None) -> int:
    """dat_cr_accept (``cr`` is the event's ``cr_handle``)."""
    return _status(
        lambda: _need(cr, Cr, Sub.INVALID_HANDLE_CR).accept(
            ep, (private_data or b"")[:private_data_size]
        )
    )


def dat_cr_query(cr: Cr, cr_param_mask: int, cr_param: Ref[CrInfo]) -> int:
    """dat_cr_query: remote address, conn_qual, private data."""
    return _status(lambda: _set(cr_param, _need(cr, Cr, Sub.INVALID_HANDLE_CR).query()))


def dat_cr_reject(cr: Cr, private_data_size: int, private_data: bytes | None) -> int:
    """dat_cr_reject (2.0: with private data for the active side)."""
    return _status(
        lambda: _need(cr, Cr, Sub.INVALID_HANDLE_CR).reject(
            (private_data or b"")[:private_data_size]
        )
    )
