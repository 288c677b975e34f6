"""The flat DAT layer: ``dat_*`` functions in the C argument order, returning the DAT_RETURN.

For C code ported line by line: out-parameters are ``Ref`` objects (``ia = Ref(); ret =
dat_ia_open("datfabric", 8, Ref(), ia)``) and a failure is the numeric DAT_RETURN, never an
exception. Handles are the objects of client.api.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.api import Ep, Evd, Ia, Lmr, Pz, Rmr
from client.core import Event, LmrInfo, Triplet
from client.dat_ep import (  # the EP, PSP, RSP and CR calls, offered here with the rest
    dat_cr_accept,
    dat_cr_query,
    dat_cr_reject,
    dat_ep_connect,
    dat_ep_create,
    dat_ep_disconnect,
    dat_ep_free,
    dat_ep_get_status,
    dat_ep_post_rdma_read,
    dat_ep_post_rdma_write,
    dat_ep_post_recv,
    dat_ep_post_send,
    dat_ep_query,
    dat_ep_reset,
    dat_ib_post_cmp_and_swap,
    dat_ib_post_fetch_and_add,
    dat_ib_post_rdma_write_immed,
    dat_psp_create,
    dat_psp_free,
    dat_rsp_create,
    dat_rsp_free,
)
from client.dat_srq import (  # the SRQ calls, offered here with the rest
    dat_ep_create_with_srq,
    dat_srq_create,
    dat_srq_free,
    dat_srq_post_recv,
    dat_srq_query,
    dat_srq_resize,
    dat_srq_set_lw,
)
from client.datref import Ref, iov, need, put, status
from proto.constants import (
    DAT_SUCCESS,
    EVD_ASYNC_EXISTS,
    DatReturnSubtype,
    MemType,
)
from proto.errors import (
    DatError,
    DatInvalidParameter,
    DatModelNotSupported,
)
from proto.errors import (
    dat_strerror as _strerror,
)

__all__ = [  # every dat_* call of the flat layer, and Ref
    "Ref",
    "dat_cr_accept",
    "dat_cr_query",
    "dat_cr_reject",
    "dat_ep_connect",
    "dat_ep_create",
    "dat_ep_create_with_srq",
    "dat_ep_disconnect",
    "dat_ep_free",
    "dat_ep_get_status",
    "dat_ep_post_rdma_read",
    "dat_ep_post_rdma_write",
    "dat_ep_post_recv",
    "dat_ep_post_send",
    "dat_ep_query",
    "dat_ep_reset",
    "dat_evd_create",
    "dat_evd_dequeue",
    "dat_evd_free",
    "dat_evd_wait",
    "dat_ia_close",
    "dat_ia_open",
    "dat_ia_query",
    "dat_ib_post_cmp_and_swap",
    "dat_ib_post_fetch_and_add",
    "dat_ib_post_rdma_write_immed",
    "dat_lmr_create",
    "dat_lmr_free",
    "dat_lmr_query",
    "dat_lmr_sync_rdma_read",
    "dat_lmr_sync_rdma_write",
    "dat_psp_create",
    "dat_psp_free",
    "dat_pz_create",
    "dat_pz_free",
    "dat_rmr_bind",
    "dat_rmr_create",
    "dat_rmr_free",
    "dat_rmr_query",
    "dat_rsp_create",
    "dat_rsp_free",
    "dat_srq_create",
    "dat_srq_free",
    "dat_srq_post_recv",
    "dat_srq_query",
    "dat_srq_resize",
    "dat_srq_set_lw",
    "dat_strerror",
]

Sub = DatReturnSubtype


# -- IA ----------------------------------------------------------------------------------------


def dat_ia_open(name: str, async_evd_qlen: int, async_evd: Ref[Any], ia: Ref[Ia]) -> int:
    """dat_ia_open: ``async_evd.value`` None creates the async EVD (EVD_ASYNC_EXISTS reuses)."""

    def run() -> None:
        if async_evd.value not in (None, EVD_ASYNC_EXISTS):
            raise DatInvalidParameter(Sub.INVALID_ARG3, "async_evd must be NULL or EXISTS")
        opened = Ia(name, async_evd_qlen)
        ia.value = opened
        async_evd.value = opened.async_evd

    return status(run)


def dat_ia_close(ia: Ia, flags: int) -> int:
    """dat_ia_close."""
    return status(lambda: need(ia, Ia, Sub.INVALID_HANDLE_IA).close(flags))


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
        attrs = need(ia, Ia, Sub.INVALID_HANDLE_IA).query()
        put(async_evd, ia.async_evd)
        put(ia_attr, attrs)
        put(
            pr_attr,
            {
                "provider_name": "datfabric",
                "lmr_sync_req": attrs["lmr_sync_req"],
                "max_private_data_size": attrs["max_private_data_size"],
            },
        )

    return status(run)


def dat_strerror(value: int, major: Ref[str], minor: Ref[str]) -> int:
    """dat_strerror: the names of a return code's type and subtype."""

    def run() -> None:
        major.value, minor.value = _strerror(value)

    return status(run)


# -- PZ, LMR -----------------------------------------------------------------------------------


def dat_pz_create(ia: Ia, pz: Ref[Pz]) -> int:
    """dat_pz_create."""
    return status(lambda: put(pz, need(ia, Ia, Sub.INVALID_HANDLE_IA).pz_create()))


def dat_pz_free(pz: Pz) -> int:
    """dat_pz_free."""
    return status(lambda: need(pz, Pz, Sub.INVALID_HANDLE_PZ).free())


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
            region = need(region_description, Lmr, Sub.INVALID_HANDLE_LMR).handle
        made = need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_create(
            mem_type, region, length, need(pz, Pz, Sub.INVALID_HANDLE_PZ), privileges
        )
        lmr.value = made
        put(lmr_context, made.lmr_context)
        put(rmr_context, made.rmr_context)
        put(registered_size, made.registered_size)
        put(registered_address, made.registered_address)

    return status(run)


def dat_lmr_query(lmr: Lmr, lmr_param_mask: int, lmr_param: Ref[LmrInfo]) -> int:
    """dat_lmr_query (the whole DAT_LMR_PARAM, whatever the mask)."""
    return status(lambda: put(lmr_param, need(lmr, Lmr, Sub.INVALID_HANDLE_LMR).query()))


def dat_lmr_sync_rdma_read(ia: Ia, local_segments: Sequence[Triplet], num_segments: int) -> int:
    """dat_lmr_sync_rdma_read."""
    return status(
        lambda: need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_sync_rdma_read(
            iov(num_segments, local_segments, Sub.INVALID_ARG3)
        )
    )


def dat_lmr_sync_rdma_write(ia: Ia, local_segments: Sequence[Triplet], num_segments: int) -> int:
    """dat_lmr_sync_rdma_write."""
    return status(
        lambda: need(ia, Ia, Sub.INVALID_HANDLE_IA).lmr_sync_rdma_write(
            iov(num_segments, local_segments, Sub.INVALID_ARG3)
        )
    )


def dat_lmr_free(lmr: Lmr) -> int:
    """dat_lmr_free."""
    return status(lambda: need(lmr, Lmr, Sub.INVALID_HANDLE_LMR).free())


def dat_rmr_create(pz: Pz, rmr: Ref[Rmr]) -> int:
    """dat_rmr_create."""

    def run() -> None:
        zone = need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        rmr.value = zone.ia.rmr_create(zone)

    return status(run)


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
        rmr_context.value = need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).bind(
            lmr,
            lmr_triplet,
            mem_privileges,
            need(ep, Ep, Sub.INVALID_HANDLE_EP),
            user_cookie,
            completion_flags,
        )

    return status(run)


def dat_rmr_query(rmr: Rmr, rmr_param_mask: int, rmr_param: Ref[dict[str, Any]]) -> int:
    """dat_rmr_query."""
    return status(lambda: put(rmr_param, need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).query()))


def dat_rmr_free(rmr: Rmr) -> int:
    """dat_rmr_free."""
    return status(lambda: need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).free())


# -- EVD ---------------------------------------------------------------------------------------


def dat_evd_create(ia: Ia, evd_min_qlen: int, cno: Any, evd_flags: int, evd: Ref[Evd]) -> int:
    """dat_evd_create (CNOs are not offered yet: ``cno`` must be None)."""

    def run() -> None:
        if cno is not None:
            raise DatModelNotSupported(message="CNOs are not offered yet")
        evd.value = need(ia, Ia, Sub.INVALID_HANDLE_IA).evd_create(evd_min_qlen, evd_flags)

    return status(run)


def dat_evd_wait(evd: Evd, timeout: int, threshold: int, event: Ref[Event], nmore: Ref[int]) -> int:
    """dat_evd_wait: on DAT_TIMEOUT_EXPIRED ``nmore`` is still set."""
    try:
        event.value, nmore.value = need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).wait(
            timeout, threshold
        )
    except DatError as err:
        nmore.value = getattr(err, "nmore", nmore.value)
        return err.code
    return DAT_SUCCESS


def dat_evd_dequeue(evd: Evd, event: Ref[Event]) -> int:
    """dat_evd_dequeue."""
    return status(lambda: put(event, need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).dequeue()))


def dat_evd_free(evd: Evd) -> int:
    """dat_evd_free."""
    return status(lambda: need(evd, Evd, Sub.INVALID_HANDLE_EVD_REQUEST).free())
