"""The consumer plane's calls: each method's arguments and result as typed records.

A CALL frame carries ``[req_id, method, args]`` and its REPLY ``[req_id, code, message, result]``;
``args`` and ``result`` are the arrays of the records below. The daemon parses ``args`` with
``proto.schema.parse`` before any handler runs (a wrong field gives the DatError its annotation
names); the client builds the same records and parses each result. Calls whose result ends with
``ep, state`` move an endpoint: the client applies that state in stream order.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Final, NamedTuple

from proto.admin_calls import FaultAdd as FaultAdd
from proto.admin_calls import FaultLines as FaultLines
from proto.admin_calls import FaultLog as FaultLog
from proto.admin_calls import FaultRemove as FaultRemove
from proto.admin_calls import FaultRules as FaultRules
from proto.admin_calls import RmrRevoke as RmrRevoke
from proto.admin_calls import RuleCount as RuleCount
from proto.errors import DatLengthError, DatModelNotSupported
from proto.handle_args import (
    EVD_CONN,
    EVD_CR,
    EVD_RECV,
    EVD_REQUEST,
    HANDLE_CR,
    HANDLE_EP,
    HANDLE_LMR,
    HANDLE_PSP,
    HANDLE_PZ,
    HANDLE_RMR,
    HANDLE_RSP,
)
from proto.schema import U64, Bad, Empty, arg
from proto.srq_calls import EpCreateWithSrq as EpCreateWithSrq
from proto.srq_calls import SrqCreate as SrqCreate
from proto.srq_calls import SrqCreated as SrqCreated
from proto.srq_calls import SrqHandle as SrqHandle
from proto.srq_calls import SrqSetLw as SrqSetLw

Triplet = list[int]
"""``[virtual_address, segment_length, lmr_context]`` (checked by proto.checks)."""

# -- arguments ---------------------------------------------------------------------------------


class PzFree(NamedTuple):
    """dat_pz_free."""

    pz: Annotated[int, HANDLE_PZ]


class LmrCreate(NamedTuple):
    """dat_lmr_create. VIRTUAL and SHARED_VIRTUAL name the consumer's shared-memory segment
    and the range's offset in it; SHARED_VIRTUAL adds the 40-byte cookie; LMR names ``parent``."""

    mem_type: Annotated[int, Bad(DatModelNotSupported)]
    segment: Annotated[str, arg(3)]
    offset: Annotated[int, arg(3)]
    address: Annotated[int, arg(3)]
    cookie: Annotated[bytes | None, arg(3)]
    parent: Annotated[int, HANDLE_LMR]
    length: Annotated[int, arg(4)]
    pz: Annotated[int, HANDLE_PZ]
    privileges: Annotated[int, arg(6)]


class LmrFree(NamedTuple):
    """dat_lmr_free."""

    lmr: Annotated[int, HANDLE_LMR]


class SharedAttach(NamedTuple):
    """Create or join the node's shared region of a DAT_LMR_COOKIE (SHARED_VIRTUAL memory)."""

    cookie: Annotated[bytes, arg(1)]
    size: Annotated[int, Bad(DatLengthError)]


class LmrSync(NamedTuple):
    """dat_lmr_sync_rdma_write (``to_cpu``) and dat_lmr_sync_rdma_read."""

    to_cpu: bool
    segments: Annotated[list[object], arg(2)]  # each checked by parse_triplet, not the schema


class RmrCreate(NamedTuple):
    """dat_rmr_create."""

    pz: Annotated[int, HANDLE_PZ]


class RmrBind(NamedTuple):
    """dat_rmr_bind(rmr, lmr, lmr_triplet, mem_privileges, va_type, ep, user_cookie,
    completion_flags, rmr_context): errors name the 2.0 argument numbers."""

    rmr: Annotated[int, HANDLE_RMR]
    lmr: Annotated[int, HANDLE_LMR]
    triplet: Annotated[Triplet, arg(3)]
    privileges: Annotated[int, arg(4)]
    ep: Annotated[int, HANDLE_EP]
    cookie: Annotated[int, arg(7)]
    flags: Annotated[int, arg(8)]


class RmrFree(NamedTuple):
    """dat_rmr_free."""

    rmr: Annotated[int, HANDLE_RMR]


class EvdCreate(NamedTuple):
    """dat_evd_create: the driver's handle for the EVD and its queue length."""

    evd: Annotated[int, arg(1)]
    qlen: Annotated[int, arg(2)]


class EvdHandle(NamedTuple):
    """dat_evd_free."""

    evd: Annotated[int, EVD_REQUEST]


class EvdPostSe(NamedTuple):
    """dat_evd_post_se: the software event's pointer value."""

    evd: Annotated[int, EVD_REQUEST]
    pointer: Annotated[int, arg(2), U64]


class EvdResize(NamedTuple):
    """dat_evd_resize: the EVD and its new queue length (evd_min_qlen)."""

    evd: Annotated[int, EVD_REQUEST]
    qlen: Annotated[int, arg(2)]


class EpCreate(NamedTuple):
    """dat_ep_create; ``pz`` 0 and EVDs 0 are the spec's NULL handles."""

    pz: Annotated[int, HANDLE_PZ]
    recv_evd: Annotated[int, EVD_RECV]
    request_evd: Annotated[int, EVD_REQUEST]
    connect_evd: Annotated[int, EVD_CONN]
    attr: Annotated[dict[str, int] | None, arg(6)]


class EpModify(NamedTuple):
    """dat_ep_modify: the named changes (pz, recv_evd, request_evd, connect_evd, attr)."""

    ep: Annotated[int, HANDLE_EP]
    changes: Annotated[dict[str, object], arg(2)]


class EpHandle(NamedTuple):
    """dat_ep_free and dat_ep_reset."""

    ep: Annotated[int, HANDLE_EP]


class EpConnect(NamedTuple):
    """dat_ep_connect (timeout in microseconds, 0xFFFFFFFF = infinite)."""

    ep: Annotated[int, HANDLE_EP]
    host: Annotated[str, arg(2)]
    port: Annotated[int, arg(2)]
    conn_qual: Annotated[int, arg(3)]
    timeout_us: Annotated[int, arg(4)]
    private_data: Annotated[bytes | None, arg(6)]


class EpDupConnect(NamedTuple):
    """dat_ep_dup_connect(ep, dup_ep, timeout, private_data_size, private_data, qos): to the
    remote address and conn_qual ``dup`` connected to."""

    ep: Annotated[int, HANDLE_EP]
    dup: Annotated[int, HANDLE_EP]
    timeout_us: Annotated[int, arg(3)]
    private_data: Annotated[bytes | None, arg(5)]


class EpSetWatermark(NamedTuple):
    """dat_ep_set_watermark: soft and hard high watermarks of the EP's receive buffers (-1:
    DAT_WATERMARK_INFINITE)."""

    ep: Annotated[int, HANDLE_EP]
    soft: Annotated[int, arg(2)]
    hard: Annotated[int, arg(3)]


class EpDisconnect(NamedTuple):
    """dat_ep_disconnect."""

    ep: Annotated[int, HANDLE_EP]
    flags: Annotated[int, arg(2)]


class PspCreate(NamedTuple):
    """dat_psp_create; ``backlog`` is the CR EVD's length."""

    conn_qual: Annotated[int, arg(2)]
    evd: Annotated[int, EVD_CR]
    flags: Annotated[int, arg(4)]
    backlog: Annotated[int, arg(3)]


class PspFree(NamedTuple):
    """dat_psp_free."""

    psp: Annotated[int, HANDLE_PSP]


class RspCreate(NamedTuple):
    """dat_rsp_create."""

    conn_qual: Annotated[int, arg(2)]
    ep: Annotated[int, HANDLE_EP]
    evd: Annotated[int, EVD_CR]


class RspFree(NamedTuple):
    """dat_rsp_free."""

    rsp: Annotated[int, HANDLE_RSP]


class CrAccept(NamedTuple):
    """dat_cr_accept; ``ep`` 0: the EP the request carries."""

    cr: Annotated[int, HANDLE_CR]
    ep: Annotated[int, HANDLE_EP]
    private_data: Annotated[bytes | None, arg(4)]


class CrReject(NamedTuple):
    """dat_cr_reject (2.0: with private data)."""

    cr: Annotated[int, HANDLE_CR]
    private_data: Annotated[bytes | None, arg(3)]


class CrHandoff(NamedTuple):
    """dat_cr_handoff: the request and the conn_qual whose listener (of this node) takes it."""

    cr: Annotated[int, HANDLE_CR]
    conn_qual: Annotated[int, arg(2)]


# -- results -----------------------------------------------------------------------------------


class Attributes(NamedTuple):
    """dat_ia_query's IA and provider attributes; node_status's figures."""

    attrs: dict[str, object]


class Handle(NamedTuple):
    """The handle a create call made."""

    handle: int


class LmrCreated(NamedTuple):
    """dat_lmr_create's outputs."""

    lmr: int
    lmr_context: int
    rmr_context: int
    registered_size: int
    registered_address: int


class SharedRegion(NamedTuple):
    """The segment of a shared region and its length."""

    segment: str
    length: int


class RmrContext(NamedTuple):
    """dat_rmr_bind's new rmr_context."""

    rmr_context: int


class EvdCreated(NamedTuple):
    """dat_evd_create and dat_evd_resize: the slots of the event queue the daemon placed."""

    entries: int


class EpCreated(NamedTuple):
    """dat_ep_create: the handle and the attributes granted."""

    ep: int
    attr: dict[str, int]


class EpModified(NamedTuple):
    """dat_ep_modify: the attributes granted, then the EP and its state."""

    attr: dict[str, int]
    ep: int
    state: int


class EpMoved(NamedTuple):
    """A call that may move an EP: which one (0: none) and its state afterwards."""

    ep: int
    state: int


class RspCreated(NamedTuple):
    """dat_rsp_create: the RSP, then the EP (now RESERVED) and its state."""

    rsp: int
    ep: int
    state: int


# -- the registry ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Method:
    """One call: its argument and result records, and whether it moves an endpoint."""

    args: type[tuple[object, ...]]
    result: type[tuple[object, ...]]
    admin: bool = False

    @property
    def moves_ep(self) -> bool:
        """Does the result end with ``ep, state``?"""
        names: tuple[str, ...] = getattr(self.result, "_fields", ())
        return names[-2:] == ("ep", "state")


METHODS: Final[dict[str, Method]] = {
    "ia_query": Method(Empty, Attributes),
    "pz_create": Method(Empty, Handle),
    "pz_free": Method(PzFree, Empty),
    "lmr_create": Method(LmrCreate, LmrCreated),
    "lmr_free": Method(LmrFree, Empty),
    "shared_attach": Method(SharedAttach, SharedRegion),
    "lmr_sync": Method(LmrSync, Empty),
    "rmr_create": Method(RmrCreate, Handle),
    "rmr_create_for_ep": Method(RmrCreate, Handle),
    "rmr_bind": Method(RmrBind, RmrContext),
    "rmr_free": Method(RmrFree, Empty),
    "evd_create": Method(EvdCreate, EvdCreated),
    "evd_free": Method(EvdHandle, Empty),
    "evd_post_se": Method(EvdPostSe, Empty),
    "evd_resize": Method(EvdResize, EvdCreated),
    "ep_create": Method(EpCreate, EpCreated),
    "ep_create_with_srq": Method(EpCreateWithSrq, EpCreated),
    "srq_create": Method(SrqCreate, SrqCreated),
    "srq_free": Method(SrqHandle, Empty),
    "srq_set_lw": Method(SrqSetLw, Empty),
    "ep_modify": Method(EpModify, EpModified),
    "ep_free": Method(EpHandle, Empty),
    "ep_connect": Method(EpConnect, EpMoved),
    "ep_dup_connect": Method(EpDupConnect, EpMoved),
    "ep_set_watermark": Method(EpSetWatermark, Empty),
    "ep_disconnect": Method(EpDisconnect, EpMoved),
    "ep_reset": Method(EpHandle, EpMoved),
    "psp_create": Method(PspCreate, Handle),
    "psp_free": Method(PspFree, EpMoved),
    "rsp_create": Method(RspCreate, RspCreated),
    "rsp_free": Method(RspFree, EpMoved),
    "cr_accept": Method(CrAccept, EpMoved),
    "cr_reject": Method(CrReject, EpMoved),
    "cr_handoff": Method(CrHandoff, EpMoved),
    "fault_add": Method(FaultAdd, RuleCount, admin=True),
    "fault_remove": Method(FaultRemove, RuleCount, admin=True),
    "fault_clear": Method(Empty, RuleCount, admin=True),
    "fault_list": Method(Empty, FaultRules, admin=True),
    "fault_log": Method(FaultLog, FaultLines, admin=True),
    "rmr_revoke": Method(RmrRevoke, Empty, admin=True),
    "node_crash": Method(Empty, Empty, admin=True),
    "node_status": Method(Empty, Attributes, admin=True),
}
"""Every consumer-plane call by its method name."""
