"""The flat DAT layer's memory calls (dat_pz_*, dat_lmr_*, dat_rmr_*), in the C argument
order, returning the DAT_RETURN (client.dat re-exports them)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.api import Ep, Ia, Lmr, Pz, Rmr
from client.core import LmrInfo, Triplet
from client.datref import Ref, iov, need, out, put, query, status
from proto.constants import DatReturnSubtype, MemType
from proto.errors import DatModelNotSupported

Sub = DatReturnSubtype


# -- PZ, LMR -----------------------------------------------------------------------------------


def dat_pz_create(ia: Ia, pz: Ref[Pz] | None) -> int:
    """dat_pz_create."""

    def run() -> None:
        owner = need(ia, Ia, Sub.INVALID_HANDLE_IA)
        ref = out(pz, Sub.INVALID_ARG2, "pz")  # before anything is made
        ref.value = owner.pz_create()

    return status(run)


def dat_pz_query(pz: Pz, pz_param_mask: int, pz_param: Ref[dict[str, Any]] | None) -> int:
    """dat_pz_query: DAT_PZ_PARAM (its IA)."""

    return query(lambda: need(pz, Pz, Sub.INVALID_HANDLE_PZ).query(), pz_param)


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
    lmr: Ref[Lmr] | None,
    lmr_context: Ref[int] | None,
    rmr_context: Ref[int] | None,
    registered_size: Ref[int] | None,
    registered_address: Ref[int] | None,
) -> int:
    """dat_lmr_create (2.0 order: va_type after privileges; only DAT_VA_TYPE_VA)."""

    def run() -> None:
        if va_type != 0:
            raise DatModelNotSupported(message="zero-based virtual addresses are not offered")
        region = region_description
        if mem_type == MemType.LMR:
            region = need(region_description, Lmr, Sub.INVALID_HANDLE_LMR).handle
        owner, zone = need(ia, Ia, Sub.INVALID_HANDLE_IA), need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        ref = out(lmr, Sub.INVALID_ARG8, "lmr")  # before anything is made
        made = ref.value = owner.lmr_create(mem_type, region, length, zone, privileges)
        put(lmr_context, made.lmr_context)
        put(rmr_context, made.rmr_context)
        put(registered_size, made.registered_size)
        put(registered_address, made.registered_address)

    return status(run)


def dat_lmr_query(lmr: Lmr, lmr_param_mask: int, lmr_param: Ref[LmrInfo] | None) -> int:
    """dat_lmr_query (the whole DAT_LMR_PARAM, whatever the mask)."""
    return query(lambda: need(lmr, Lmr, Sub.INVALID_HANDLE_LMR).query(), lmr_param)


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


def dat_rmr_create(pz: Pz, rmr: Ref[Rmr] | None) -> int:
    """dat_rmr_create."""

    def run() -> None:
        zone = need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        ref = out(rmr, Sub.INVALID_ARG2, "rmr")  # before anything is made
        ref.value = zone.ia.rmr_create(zone)

    return status(run)


def dat_rmr_create_for_ep(pz: Pz, rmr: Ref[Rmr] | None) -> int:
    """dat_rmr_create_for_ep: an RMR of DAT_RMR_SCOPE_EP (usable only through the EP it is
    bound to)."""

    def run() -> None:
        zone = need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        ref = out(rmr, Sub.INVALID_ARG2, "rmr")  # before anything is made
        ref.value = zone.ia.rmr_create_for_ep(zone)

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
    rmr_context: Ref[int] | None,
) -> int:
    """dat_rmr_bind (2.0 order: rmr, lmr, triplet, privileges, va_type, ep, ...; the new
    rmr_context into ``rmr_context`` if one is given)."""

    def run() -> None:
        if va_type != 0:
            raise DatModelNotSupported(message="zero-based virtual addresses are not offered")
        context = need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).bind(
            lmr,
            lmr_triplet,
            mem_privileges,
            need(ep, Ep, Sub.INVALID_HANDLE_EP),
            user_cookie,
            completion_flags,
        )
        put(rmr_context, context)

    return status(run)


def dat_rmr_query(rmr: Rmr, rmr_param_mask: int, rmr_param: Ref[dict[str, Any]] | None) -> int:
    """dat_rmr_query."""
    return query(lambda: need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).query(), rmr_param)


def dat_rmr_free(rmr: Rmr) -> int:
    """dat_rmr_free."""
    return status(lambda: need(rmr, Rmr, Sub.INVALID_HANDLE_RMR).free())
