"""The flat DAT layer: ``dat_*`` functions in the C argument order, returning the DAT_RETURN.

For C code ported line by line: out-parameters are ``Ref`` objects (``ia = Ref(); ret =
dat_ia_open("datfabric", 8, Ref(), ia)``) and a failure is the numeric DAT_RETURN, never an
exception. Handles are the objects of client.api.
"""

from __future__ import annotations

from typing import Any

from client.api import Evd, Ia
from client.common import decline
from client.dat_cm import (  # the PSP, RSP, CR and CSP calls, offered here with the rest
    dat_cr_accept,
    dat_cr_handoff,
    dat_cr_query,
    dat_cr_reject,
    dat_csp_create,
    dat_csp_free,
    dat_csp_query,
    dat_psp_create,
    dat_psp_create_any,
    dat_psp_free,
    dat_psp_query,
    dat_rsp_create,
    dat_rsp_free,
    dat_rsp_query,
)
from client.dat_ep import (  # the EP calls
    dat_ep_common_connect,
    dat_ep_connect,
    dat_ep_create,
    dat_ep_disconnect,
    dat_ep_dup_connect,
    dat_ep_free,
    dat_ep_get_status,
    dat_ep_modify,
    dat_ep_post_rdma_read,
    dat_ep_post_rdma_read_to_rmr,
    dat_ep_post_rdma_write,
    dat_ep_post_recv,
    dat_ep_post_send,
    dat_ep_post_send_with_invalidate,
    dat_ep_query,
    dat_ep_recv_query,
    dat_ep_reset,
    dat_ep_set_watermark,
    dat_ib_post_cmp_and_swap,
    dat_ib_post_fetch_and_add,
    dat_ib_post_rdma_write_immed,
)
from client.dat_evd import (  # the EVD and CNO calls
    dat_cno_create,
    dat_cno_fd_create,
    dat_cno_free,
    dat_cno_modify_agent,
    dat_cno_query,
    dat_cno_trigger,
    dat_cno_wait,
    dat_evd_clear_unwaitable,
    dat_evd_create,
    dat_evd_dequeue,
    dat_evd_disable,
    dat_evd_enable,
    dat_evd_free,
    dat_evd_modify_cno,
    dat_evd_post_se,
    dat_evd_query,
    dat_evd_resize,
    dat_evd_set_unwaitable,
    dat_evd_wait,
)
from client.dat_mem import (  # the PZ, LMR and RMR calls
    dat_lmr_create,
    dat_lmr_free,
    dat_lmr_query,
    dat_lmr_sync_rdma_read,
    dat_lmr_sync_rdma_write,
    dat_pz_create,
    dat_pz_free,
    dat_pz_query,
    dat_rmr_bind,
    dat_rmr_create,
    dat_rmr_create_for_ep,
    dat_rmr_free,
    dat_rmr_query,
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
from client.datref import Ref, need, out, put, status
from client.handle import Handle
from proto.attrs import PROVIDER_FIELDS
from proto.constants import (
    EVD_ASYNC_EXISTS,
    DatReturnSubtype,
    HandleType,
)
from proto.errors import (
    DatInvalidHandle,
    DatInvalidParameter,
)
from proto.errors import (
    dat_strerror as _strerror,
)

__all__ = [  # every dat_* call of the flat layer, and Ref
    "Ref",
    "dat_cno_create",
    "dat_cno_fd_create",
    "dat_cno_free",
    "dat_cno_modify_agent",
    "dat_cno_query",
    "dat_cno_trigger",
    "dat_cno_wait",
    "dat_cr_accept",
    "dat_cr_handoff",
    "dat_cr_query",
    "dat_cr_reject",
    "dat_csp_create",
    "dat_csp_free",
    "dat_csp_query",
    "dat_ep_common_connect",
    "dat_ep_connect",
    "dat_ep_create",
    "dat_ep_create_with_srq",
    "dat_ep_disconnect",
    "dat_ep_dup_connect",
    "dat_ep_free",
    "dat_ep_get_status",
    "dat_ep_modify",
    "dat_ep_post_rdma_read",
    "dat_ep_post_rdma_read_to_rmr",
    "dat_ep_post_rdma_write",
    "dat_ep_post_recv",
    "dat_ep_post_send",
    "dat_ep_post_send_with_invalidate",
    "dat_ep_query",
    "dat_ep_recv_query",
    "dat_ep_reset",
    "dat_ep_set_watermark",
    "dat_evd_clear_unwaitable",
    "dat_evd_create",
    "dat_evd_dequeue",
    "dat_evd_disable",
    "dat_evd_enable",
    "dat_evd_free",
    "dat_evd_modify_cno",
    "dat_evd_post_se",
    "dat_evd_query",
    "dat_evd_resize",
    "dat_evd_set_unwaitable",
    "dat_evd_wait",
    "dat_get_consumer_context",
    "dat_get_handle_type",
    "dat_ia_close",
    "dat_ia_ha_related",
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
    "dat_psp_create_any",
    "dat_psp_free",
    "dat_psp_query",
    "dat_pz_create",
    "dat_pz_free",
    "dat_pz_query",
    "dat_rmr_bind",
    "dat_rmr_create",
    "dat_rmr_create_for_ep",
    "dat_rmr_free",
    "dat_rmr_query",
    "dat_rsp_create",
    "dat_rsp_free",
    "dat_rsp_query",
    "dat_set_consumer_context",
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


def dat_ia_open(
    name: str, async_evd_qlen: int, async_evd: Ref[Any] | None, ia: Ref[Ia] | None
) -> int:
    """dat_ia_open: ``async_evd.value`` None creates the async EVD (EVD_ASYNC_EXISTS reuses)."""

    def run() -> None:
        evd_out = out(async_evd, Sub.INVALID_ARG3, "async_evd")
        ia_out = out(ia, Sub.INVALID_ARG4, "ia")
        if evd_out.value not in (None, EVD_ASYNC_EXISTS):
            raise DatInvalidParameter(Sub.INVALID_ARG3, "async_evd must be NULL or EXISTS")
        opened = ia_out.value = Ia(name, async_evd_qlen)
        evd_out.value = opened.async_evd

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
    """dat_ia_query: the async EVD, DAT_IA_ATTR and DAT_PROVIDER_ATTR, each into its
    out-parameter if one is given (as mappings, every field: the spec lets a provider return
    more than the masks ask); a mask with a NULL (None) out-parameter is
    DAT_INVALID_PARAMETER."""

    def run() -> None:
        owner = need(ia, Ia, Sub.INVALID_HANDLE_IA)
        if ia_mask and ia_attr is None:
            raise DatInvalidParameter(Sub.INVALID_ARG4, "ia_attr is NULL")
        if pr_mask and pr_attr is None:
            raise DatInvalidParameter(Sub.INVALID_ARG6, "provider_attr is NULL")
        put(async_evd, owner.async_evd)
        if ia_attr is not None or pr_attr is not None:
            attrs = owner.query()
            put(ia_attr, attrs)
            put(pr_attr, {key: attrs[key] for key in PROVIDER_FIELDS})

    return status(run)


def dat_ia_ha_related(ia: Ia, provider: str, answer: Ref[bool]) -> int:
    """dat_ia_ha_related: DAT_MODEL_NOT_SUPPORTED (client.common.DECLINED)."""
    return status(lambda: decline("dat_ia_ha_related"))


# -- any handle --------------------------------------------------------------------------------


def _owner(handle: Any) -> Ia:
    """The IA a handle of the blocking API belongs to (the IA itself for an IA)."""
    if isinstance(handle, Ia):
        return handle
    if isinstance(handle, Handle):
        return handle.ia
    raise DatInvalidHandle(Sub.NO_SUBTYPE, f"not a DAT handle: {handle!r}")


def dat_set_consumer_context(handle: Any, context: Any) -> int:
    """dat_set_consumer_context: any value (a DAT_CONTEXT), kept with the handle."""
    return status(lambda: _owner(handle).set_consumer_context(handle, context))


def dat_get_consumer_context(handle: Any, context: Ref[Any] | None) -> int:
    """dat_get_consumer_context (None if nothing was set)."""

    def run() -> None:
        value = _owner(handle).get_consumer_context(handle)
        out(context, Sub.INVALID_ARG2, "context").value = value

    return status(run)


def dat_get_handle_type(handle: Any, handle_type: Ref[HandleType] | None) -> int:
    """dat_get_handle_type."""

    def run() -> None:
        kind = _owner(handle).get_handle_type(handle)
        out(handle_type, Sub.INVALID_ARG2, "handle_type").value = kind

    return status(run)


def dat_strerror(value: int, major: Ref[str], minor: Ref[str]) -> int:
    """dat_strerror: the names of a return code's type and subtype."""

    def run() -> None:
        major.value, minor.value = _strerror(value)

    return status(run)
