"""The flat layer's shared receive queue calls (client.dat offers them): dat_srq_create, _free,
_post_recv, _query, _resize, _set_lw and dat_ep_create_with_srq, in the C argument order,
returning the DAT_RETURN."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from client.api import Ep, Evd, Ia, Pz, Srq
from client.core import Triplet
from client.datref import Ref, iov, need, out, query, status
from proto.attrs import EpAttr, SrqAttr
from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInvalidParameter


def dat_srq_create(ia: Ia, pz: Pz, srq_attr: SrqAttr | None, srq: Ref[Srq] | None) -> int:
    """dat_srq_create."""

    def run() -> None:
        if not isinstance(srq_attr, SrqAttr):
            raise DatInvalidParameter(Sub.INVALID_ARG3, "srq_attr is a DAT_SRQ_ATTR")
        a = srq_attr
        owner, zone = need(ia, Ia, Sub.INVALID_HANDLE_IA), need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        made = out(srq, Sub.INVALID_ARG4, "srq")
        made.value = owner.srq_create(zone, a.max_recv_dtos, a.max_recv_iov, a.low_watermark)

    return status(run)


def dat_srq_free(srq: Srq) -> int:
    """dat_srq_free."""
    return status(lambda: need(srq, Srq, Sub.INVALID_HANDLE_SRQ).free())


def dat_srq_post_recv(
    srq: Srq, num_segments: int, local_iov: Sequence[Triplet] | None, user_cookie: int
) -> int:
    """dat_srq_post_recv."""

    def run() -> None:
        target = need(srq, Srq, Sub.INVALID_HANDLE_SRQ)
        target.post_recv(iov(num_segments, local_iov), user_cookie)

    return status(run)


def dat_srq_query(srq: Srq, srq_param_mask: int, srq_param: Ref[dict[str, Any]] | None) -> int:
    """dat_srq_query (the whole DAT_SRQ_PARAM, whatever the mask)."""
    return query(lambda: need(srq, Srq, Sub.INVALID_HANDLE_SRQ).query(), srq_param)


def dat_srq_resize(srq: Srq, srq_max_recv_dto: int) -> int:
    """dat_srq_resize."""
    return status(lambda: need(srq, Srq, Sub.INVALID_HANDLE_SRQ).resize(srq_max_recv_dto))


def dat_srq_set_lw(srq: Srq, low_watermark: int) -> int:
    """dat_srq_set_lw."""
    return status(lambda: need(srq, Srq, Sub.INVALID_HANDLE_SRQ).set_lw(low_watermark))


def dat_ep_create_with_srq(
    ia: Ia,
    pz: Pz,
    recv_evd: Evd | None,
    request_evd: Evd | None,
    connect_evd: Evd | None,
    srq: Srq,
    ep_attr: EpAttr | None,
    ep: Ref[Ep] | None,
) -> int:
    """dat_ep_create_with_srq (``ep_attr`` None: the provider defaults)."""

    def run() -> None:
        owner, zone = need(ia, Ia, Sub.INVALID_HANDLE_IA), need(pz, Pz, Sub.INVALID_HANDLE_PZ)
        shared = need(srq, Srq, Sub.INVALID_HANDLE_SRQ)
        made = out(ep, Sub.INVALID_ARG8, "ep")
        made.value = owner.ep_create_with_srq(
            zone, recv_evd, request_evd, connect_evd, shared, ep_attr
        )

    return status(run)
