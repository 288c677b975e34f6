"""The plumbing of the hub's call tables: a route (a call's argument record and its handler
behind the record's parse) and the quota every create call checks first (proto.limits)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final, TypeVar

from fabricd.nic.objects import Consumer
from proto.constants import DatReturnSubtype as Sub
from proto.errors import DatInsufficientResources
from proto.limits import Limits
from proto.schema import parse

A = TypeVar("A", bound=tuple[object, ...])
Run = Callable[[Consumer, object, str], Sequence[object]]
Route = tuple[type[tuple[object, ...]], Run]

QUOTAS: Final = {  # a create call: the IA's objects of that kind, their limit, DAT_RESOURCE_*
    "pz_create": ("pzs", "ia_pzs", Sub.RESOURCE_PROTECTION_DOMAIN),
    "evd_create": ("evds", "ia_evds", Sub.RESOURCE_TEVD),
    "ep_create": ("eps", "ia_eps", Sub.RESOURCE_TEP),
    "lmr_create": ("lmrs", "ia_lmrs", Sub.RESOURCE_MEMORY_REGION),
    "rmr_create": ("rmrs", "ia_rmrs", Sub.RESOURCE_MEMORY_REGION),
    "rmr_create_for_ep": ("rmrs", "ia_rmrs", Sub.RESOURCE_MEMORY_REGION),
    "psp_create": ("psps", "ia_listeners", Sub.RESOURCE_MEMORY),
    "rsp_create": ("psps", "ia_listeners", Sub.RESOURCE_MEMORY),
    "srq_create": ("srqs", "ia_srqs", Sub.RESOURCE_SRQ),
    "ep_create_with_srq": ("eps", "ia_eps", Sub.RESOURCE_TEP),
}


def route(args: type[A], handler: Callable[[Consumer, A], Sequence[object]]) -> Route:
    """A call's argument record, and its handler behind the parse of that record."""

    def run(consumer: Consumer, values: object, method: str) -> Sequence[object]:
        return handler(consumer, parse(args, values, method))

    return args, run


def within_quota(consumer: Consumer, limits: Limits, method: str) -> None:
    """A create call may add one object of its kind to the IA (DAT_INSUFFICIENT_RESOURCES with
    the kind's DAT_RESOURCE_* subtype, nothing changed, when the IA holds its limit)."""
    quota = QUOTAS.get(method)
    if quota is None:
        return
    kind, limit, subtype = quota
    most: int = getattr(limits, limit)
    if len(getattr(consumer, kind)) >= most:
        raise DatInsufficientResources(
            subtype, f"this IA holds its limit of {most} {kind} (--limit {limit})"
        )
