"""The flat DAT layer's service point and connection request calls (dat_psp_*, dat_rsp_*,
dat_cr_*, and the declined dat_csp_*), in the C argument order, returning the DAT_RETURN
(client.dat re-exports them)."""

from __future__ import annotations

from typing import Any

from client.api import Cr, Ep, Evd, Ia, Psp, Rsp
from client.common import decline
from client.core import CrInfo
from client.datref import Ref, need, out, query, status
from proto.constants import DatReturnSubtype

Sub = DatReturnSubtype


# -- PSP, RSP, CR ------------------------------------------------------------------------------


def dat_psp_create(ia: Ia, conn_qual: int, evd: Evd, psp_flags: int, psp: Ref[Psp] | None) -> int:
    """dat_psp_create."""

    def run() -> None:
        owner, cr_evd = (
            need(ia, Ia, Sub.INVALID_HANDLE_IA),
            need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR),
        )
        ref = out(psp, Sub.INVALID_ARG5, "psp")  # before anything is made
        ref.value = owner.psp_create(conn_qual, cr_evd, psp_flags)

    return status(run)


def dat_psp_create_any(
    ia: Ia, conn_qual: Ref[int] | None, evd: Evd, psp_flags: int, psp: Ref[Psp] | None
) -> int:
    """dat_psp_create_any: the conn_qual the provider picked, and the PSP."""

    def run() -> None:
        owner = need(ia, Ia, Sub.INVALID_HANDLE_IA)
        qual_out = out(conn_qual, Sub.INVALID_ARG2, "conn_qual")
        cr_evd = need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR)
        psp_out = out(psp, Sub.INVALID_ARG5, "psp")
        psp_out.value, qual_out.value = owner.psp_create_any(cr_evd, psp_flags)

    return status(run)


def dat_psp_query(psp: Psp, psp_param_mask: int, psp_param: Ref[dict[str, Any]] | None) -> int:
    """dat_psp_query (the whole DAT_PSP_PARAM, whatever the mask)."""
    return query(lambda: need(psp, Psp, Sub.INVALID_HANDLE_PSP).query(), psp_param)


def dat_psp_free(psp: Psp) -> int:
    """dat_psp_free."""
    return status(lambda: need(psp, Psp, Sub.INVALID_HANDLE_PSP).free())


def dat_rsp_create(ia: Ia, conn_qual: int, ep: Ep, evd: Evd, rsp: Ref[Rsp] | None) -> int:
    """dat_rsp_create."""

    def run() -> None:
        owner, endpoint = need(ia, Ia, Sub.INVALID_HANDLE_IA), need(ep, Ep, Sub.INVALID_HANDLE_EP)
        cr_evd = need(evd, Evd, Sub.INVALID_HANDLE_EVD_CR)
        ref = out(rsp, Sub.INVALID_ARG5, "rsp")  # before anything is made
        ref.value = owner.rsp_create(conn_qual, endpoint, cr_evd)

    return status(run)


def dat_rsp_query(rsp: Rsp, rsp_param_mask: int, rsp_param: Ref[dict[str, Any]] | None) -> int:
    """dat_rsp_query (the whole DAT_RSP_PARAM, whatever the mask)."""
    return query(lambda: need(rsp, Rsp, Sub.INVALID_HANDLE_RSP).query(), rsp_param)


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


def dat_cr_query(cr: Cr, cr_param_mask: int, cr_param: Ref[CrInfo] | None) -> int:
    """dat_cr_query: remote address, conn_qual, private data."""
    return query(lambda: need(cr, Cr, Sub.INVALID_HANDLE_CR).query(), cr_param)


def dat_cr_reject(cr: Cr, private_data_size: int, private_data: bytes | None) -> int:
    """dat_cr_reject (2.0: with private data for the active side)."""
    return status(
        lambda: need(cr, Cr, Sub.INVALID_HANDLE_CR).reject(
            (private_data or b"")[:private_data_size]
        )
    )


def dat_cr_handoff(cr: Cr, handoff: int) -> int:
    """dat_cr_handoff: the request goes to the listener of conn_qual ``handoff`` on this node;
    ``cr`` is destroyed."""
    return status(lambda: need(cr, Cr, Sub.INVALID_HANDLE_CR).handoff(handoff))


# -- CSP: declined -----------------------------------------------------------------------------


def dat_csp_create(ia: Ia, comm: Any, address: Any, evd: Evd | None, csp: Ref[Any]) -> int:
    """dat_csp_create: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_csp_create"))


def dat_csp_query(csp: Any, csp_param_mask: int, csp_param: Ref[Any]) -> int:
    """dat_csp_query: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_csp_query"))


def dat_csp_free(csp: Any) -> int:
    """dat_csp_free: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_csp_free"))
